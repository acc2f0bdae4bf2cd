"""Where the ``jvm-shim`` Maven module (the embedded broker's launcher) is built.

Three places, first match wins:

1. ``$UNALIGNED_JVM_SHIM_DIR``, if set.
2. The checkout's ``jvm-shim/`` next to ``pysrc/`` (an editable install, ``./dev``): built in place.
3. An installed package: the wheel carries the module's ``pom.xml`` and ``src/`` as package data
   (``unaligned/testing/jvm_shim/``, a symlink to ``jvm-shim/`` in the checkout). They are copied
   into a user cache directory (``$UNALIGNED_CACHE_DIR``, else ``$XDG_CACHE_HOME/unaligned``,
   else ``~/.cache/unaligned``) under a name that carries their fingerprint, and Maven builds
   there on first use; site-packages is never written.

Another Apache Kafka version than the pom's (:func:`versioned_shim_dir`, e.g. the oldest
supported broker in the tests) is built from a copy of those sources in the cache whose pom
names that version, one directory per version: the default build is never touched.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

SHIM_DIR_ENV = "UNALIGNED_JVM_SHIM_DIR"
"""Environment variable naming the ``jvm-shim`` directory to build and run."""

CACHE_DIR_ENV = "UNALIGNED_CACHE_DIR"
"""Environment variable naming the user cache directory (default: ``~/.cache/unaligned``)."""

PACKAGED_SOURCES = Path(__file__).resolve().parent / "jvm_shim"
"""The shim's ``pom.xml`` and ``src/`` as installed package data."""

CHECKOUT_SHIM_DIR = Path(__file__).resolve().parents[3] / "jvm-shim"
"""``<checkout>/jvm-shim``: ``pysrc/unaligned/testing`` -> ``../../../jvm-shim``."""


def source_files(directory: Path) -> Iterator[Path]:
    """``pom.xml`` and every file under ``src/`` (sorted): what a build is made from."""
    yield directory / "pom.xml"
    src = directory / "src"
    if src.is_dir():
        yield from sorted(path for path in src.rglob("*") if path.is_file())


def sources_digest(directory: Path, prefix: bytes = b"") -> str:
    """SHA-256 over ``prefix``, then the relative names and contents of :func:`source_files`."""
    digest = hashlib.sha256(prefix)
    for path in source_files(directory):
        digest.update(str(path.relative_to(directory)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def user_cache_dir() -> Path:
    """``$UNALIGNED_CACHE_DIR``, else ``$XDG_CACHE_HOME/unaligned``, else
    ``~/.cache/unaligned``."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "unaligned").resolve()


def copy_to_cache(packaged: Path, cache: Path) -> Path:
    """``packaged``'s sources copied to ``<cache>/jvm-shim-<digest>`` (once: a directory of that
    name already holds exactly these sources). Written to a temporary name first, then renamed,
    so a half-copied directory is never used."""
    target = cache / f"jvm-shim-{sources_digest(packaged)[:16]}"
    if (target / "pom.xml").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    partial = cache / f".{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    for path in source_files(packaged):
        dest = partial / path.relative_to(packaged)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    try:
        os.replace(partial, target)
    except OSError:  # another process copied the same sources first
        shutil.rmtree(partial, ignore_errors=True)
    return target


def shim_dir() -> Path:
    """The ``jvm-shim`` directory to build and run (see the module docstring for the order).
    When none of the three exists, the checkout's path is returned and the build names it."""
    override = os.environ.get(SHIM_DIR_ENV)
    if override:
        return Path(override).resolve()
    if (CHECKOUT_SHIM_DIR / "pom.xml").is_file():
        return CHECKOUT_SHIM_DIR
    if (PACKAGED_SOURCES / "pom.xml").is_file():
        return copy_to_cache(PACKAGED_SOURCES, user_cache_dir())
    return CHECKOUT_SHIM_DIR


_KAFKA_VERSION_PROPERTY = re.compile(r"<kafka\.version>([^<]+)</kafka\.version>")
#: ``org.apache.kafka:kafka-server`` (KafkaConfig's supertypes in 4.x) is published from 3.7 on;
#: a pom for an older release leaves that dependency out.
_KAFKA_SERVER_DEPENDENCY = re.compile(
    r"\s*<dependency>\s*<groupId>org\.apache\.kafka</groupId>\s*"
    r"<artifactId>kafka-server</artifactId>.*?</dependency>",
    re.DOTALL,
)
_VERSIONED_RECIPE = b"2"  # bump when versioned_pom changes: a new directory is made


def kafka_version(directory: Path) -> str:
    """The Apache Kafka version the ``pom.xml`` in ``directory`` builds."""
    found = _KAFKA_VERSION_PROPERTY.search((directory / "pom.xml").read_text())
    if found is None:
        raise ValueError(f"{directory / 'pom.xml'} sets no <kafka.version>")
    return found.group(1)


def versioned_pom(pom: str, version: str) -> str:
    """``pom`` building Apache Kafka ``version`` (without the dependencies that release does
    not publish)."""
    pom = _KAFKA_VERSION_PROPERTY.sub(f"<kafka.version>{version}</kafka.version>", pom)
    if tuple(int(part) for part in version.split(".")[:2]) < (3, 7):
        pom = _KAFKA_SERVER_DEPENDENCY.sub("", pom)
    return pom


def versioned_shim_dir(version: str, base: Path | None = None) -> Path:
    """A ``jvm-shim`` that builds Apache Kafka ``version``: ``base`` (default :func:`shim_dir`)
    itself when its pom already names it, else a copy in the user cache directory whose pom
    does (``<cache>/jvm-shim-kafka-<version>-<digest>``, made once)."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"a Kafka version is like 3.6.2, got {version!r}")
    base = shim_dir() if base is None else base
    if kafka_version(base) == version:
        return base
    cache = user_cache_dir()
    digest = sources_digest(base, _VERSIONED_RECIPE + version.encode())[:16]
    target = cache / f"jvm-shim-kafka-{version}-{digest}"
    if (target / "pom.xml").is_file():
        return target
    partial = cache / f".{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    for path in source_files(base):
        dest = partial / path.relative_to(base)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    pom = partial / "pom.xml"
    pom.write_text(versioned_pom(pom.read_text(), version))
    try:
        os.replace(partial, target)
    except OSError:  # another process made the same copy first
        shutil.rmtree(partial, ignore_errors=True)
    return target
