"""Trust and key stores as Spark's Kafka options give them, turned into one ``ssl.SSLContext``.

:class:`TlsSettings` is what the ``kafka.ssl.*`` options say (parsed by
:mod:`unaligned.kafka.clients.security_options`): where the trusted certificates and the
client's own key and certificate chain come from, a CRL file, and whether the broker's host
name is checked. It is picklable and holds paths and inline text only: files are read, and
PKCS12 stores converted, in the process that connects (:func:`tls_context`, once per process
and settings), as Kafka's Java clients read them where they run. So a store's file must be at
its path on every host that runs the query's Python workers (``spark-submit --files``), or its
content given inline.

Each store is a :class:`StoreFile` (a ``PEM`` or ``PKCS12`` file with its password; a location
without ``type`` is read by its content, as Java reads its default ``JKS`` type) or an
:class:`InlinePem` (``kafka.ssl.truststore.certificates``, ``kafka.ssl.keystore.key``,
``kafka.ssl.keystore.certificate.chain``). A JKS store is refused naming the one ``keytool``
command that converts it. The client's key never reaches a file unencrypted: a key taken from
a PKCS12 store or an inline value is written encrypted with a one-time password to a private
temporary file, loaded and deleted at once (Python's ``ssl`` loads keys from files only).

Messages name the option and the path, never a password or a key.
"""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from dataclasses import dataclass, field
from typing import Any

from unaligned._util.process_memo import ProcessMemo
from unaligned.errors import OptionError

#: The first bytes of a Java KeyStore (JKS) file.
JKS_MAGIC = b"\xfe\xed\xfe\xed"
PEM_MARKER = b"-----BEGIN"


def keytool_conversion(option: str, path: str) -> str:
    """The message that refuses a JKS store at ``path`` and names the command converting it."""
    return (
        f"option '{option}' names a JKS store ({path}), which Python's ssl cannot read: convert "
        f"it once with `keytool -importkeystore -srckeystore {path} -srcstoretype JKS "
        f"-destkeystore {os.path.splitext(path)[0]}.p12 -deststoretype PKCS12` and set the "
        "store's type to PKCS12 (or give PEM)"
    )


@dataclass(frozen=True)
class StoreFile:
    """A store file: ``store_type`` ``PEM``, ``PKCS12`` or ``None`` (read by its content)."""

    option: str
    path: str
    store_type: str | None
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class InlinePem:
    """PEM text given in the option named ``option`` itself."""

    option: str
    text: str = field(repr=False)


Store = StoreFile | InlinePem


@dataclass(frozen=True)
class ClientIdentity:
    """The client's certificate chain and key (mutual TLS): ``key`` ``None`` when ``chain``
    holds the key too (a PEM key store, a PKCS12 store); ``key_password`` decrypts the key."""

    chain: Store
    key: Store | None = None
    key_password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class TlsSettings:
    """Everything a TLS connection to the brokers takes (module docstring). ``trust`` ``None``:
    the system's trusted authorities."""

    trust: Store | None = None
    identity: ClientIdentity | None = None
    crl_file: str | None = None
    check_hostname: bool = True


_CONTEXTS: ProcessMemo[TlsSettings, ssl.SSLContext] = ProcessMemo()


def tls_context(settings: TlsSettings) -> ssl.SSLContext:
    """The process's ``SSLContext`` for ``settings``, made on first use: TLS 1.2 or later, the
    server's certificate checked against the trusted ones (and its host name unless
    ``check_hostname`` is off), the client's chain presented when given. Raises
    :class:`OptionError` naming the option whose store cannot be read."""
    context = _CONTEXTS.get(settings)
    if context is None:
        context = _build_context(settings)
        _CONTEXTS.put(settings, context)
    return context


def _build_context(settings: TlsSettings) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = settings.check_hostname
    if settings.trust is None:
        context.load_default_certs()
    else:
        _load_trust(context, settings.trust)
    if settings.crl_file is not None:
        try:
            context.load_verify_locations(cafile=settings.crl_file)
        except (OSError, ssl.SSLError) as exc:
            raise OptionError(
                f"option 'kafka.ssl.crlfile': cannot read {settings.crl_file}: {exc}"
            ) from None
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if settings.identity is not None:
        _load_identity(context, settings.identity)
    return context


def _read(store: StoreFile) -> bytes:
    try:
        with open(store.path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise OptionError(
            f"option '{store.option}': cannot read {store.path}: {exc.strerror or exc} (a "
            "store must be at this path on every host that runs the query's Python workers: "
            "ship it with spark-submit --files, or give its content inline)"
        ) from None


def _store_type(store: StoreFile, data: bytes) -> str:
    """``PEM`` or ``PKCS12``; a JKS store (said or found) is refused with its conversion."""
    if data.startswith(JKS_MAGIC) or store.store_type == "JKS":
        raise OptionError(keytool_conversion(store.option, store.path))
    if store.store_type is not None:
        return store.store_type
    return "PEM" if PEM_MARKER in data[:4096] else "PKCS12"


def _pkcs12(store: StoreFile, data: bytes) -> Any:
    from cryptography.hazmat.primitives.serialization import pkcs12  # only for PKCS12 stores

    password = store.password.encode() if store.password else None
    try:
        return pkcs12.load_pkcs12(data, password)
    except ValueError:
        raise OptionError(
            f"option '{store.option}': {store.path} is not a PKCS12 store this password opens "
            "(check the store's password option and its type)"
        ) from None


def _certificates_pem(loaded: Any) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding

    certs = ([loaded.cert] if loaded.cert is not None else []) + list(loaded.additional_certs)
    return "".join(c.certificate.public_bytes(Encoding.PEM).decode() for c in certs)


def _load_trust(context: ssl.SSLContext, store: Store) -> None:
    try:
        if isinstance(store, InlinePem):
            context.load_verify_locations(cadata=store.text)
            return
        data = _read(store)
        if _store_type(store, data) == "PEM":
            context.load_verify_locations(cadata=data.decode("ascii", "replace"))
            return
        loaded = _pkcs12(store, data)
        pem = _certificates_pem(loaded)
        if not pem:
            raise OptionError(f"option '{store.option}': {store.path} holds no certificate")
        context.load_verify_locations(cadata=pem)
    except ssl.SSLError as exc:
        raise OptionError(f"option '{store.option}': no trusted certificate read: {exc}") from None


def _load_identity(context: ssl.SSLContext, identity: ClientIdentity) -> None:
    chain = identity.chain
    if isinstance(chain, StoreFile) and identity.key is None:
        data = _read(chain)
        if _store_type(chain, data) == "PKCS12":
            loaded = _pkcs12(chain, data)
            if loaded.key is None or loaded.cert is None:
                raise OptionError(
                    f"option '{chain.option}': {chain.path} holds no private key with its "
                    "certificate"
                )
            _load_key_and_chain(context, chain.option, loaded.key, _certificates_pem(loaded))
            return
        _load_files(context, chain.option, chain.path, None, identity.key_password)
        return
    if isinstance(chain, StoreFile) and isinstance(identity.key, StoreFile):
        _load_files(context, chain.option, chain.path, identity.key.path, identity.key_password)
        return
    key = identity.key if identity.key is not None else chain
    key_text = key.text.encode() if isinstance(key, InlinePem) else _read(key)
    chain_text = chain.text if isinstance(chain, InlinePem) else _read(chain).decode()
    _load_key_and_chain(
        context, key.option, _private_key(key.option, key_text, identity.key_password), chain_text
    )


def _load_files(
    context: ssl.SSLContext, option: str, chain: str, key: str | None, password: str | None
) -> None:
    try:
        context.load_cert_chain(chain, key, password)
    except (ssl.SSLError, OSError) as exc:
        raise OptionError(
            f"option '{option}': cannot load the client's key and certificate chain from "
            f"{chain}{' and ' + key if key else ''}: {exc} (is the key password right?)"
        ) from None


def _private_key(option: str, pem: bytes, password: str | None) -> Any:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        return load_pem_private_key(pem, password.encode() if password else None)
    except (ValueError, TypeError):
        raise OptionError(
            f"option '{option}': not a PEM private key that kafka.ssl.key.password opens "
            "(value not shown)"
        ) from None


def _load_key_and_chain(context: ssl.SSLContext, option: str, key: Any, chain_pem: str) -> None:
    """Load ``key`` (a ``cryptography`` private key) and ``chain_pem`` through a private
    temporary file, the key encrypted with a one-time password; the file is deleted at once."""
    from cryptography.hazmat.primitives import serialization

    once = secrets.token_urlsafe(24)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(once.encode()),
    )
    with tempfile.TemporaryDirectory(prefix="unaligned-tls-") as directory:
        path = os.path.join(directory, "identity.pem")
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as f:
            f.write(encrypted + b"\n" + chain_pem.encode())
        try:
            context.load_cert_chain(path, None, once)
        except ssl.SSLError as exc:
            raise OptionError(
                f"option '{option}': the key does not match the certificate chain: {exc}"
            ) from None
