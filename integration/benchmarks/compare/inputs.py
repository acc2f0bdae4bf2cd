"""Input topics for the benchmarks, and the machine their figures come from.

Values are ``VALUE_BYTES`` (100) bytes of text, unique per record: ``<partition>-<sequence>``
padded with ``.``, so an output can be checked for duplicates and losses. Each partition is
produced by one ``kcat -P`` (uncompressed, large batches), all partitions at once.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

VALUE_BYTES = 100
PARTITIONS = 8


def prepare_process() -> None:
    """What every Spark benchmark needs first: kcat on PATH, and Spark's Python workers run by
    this interpreter."""
    if shutil.which("kcat") is None:
        raise SystemExit("kcat is not on PATH: apt-get install kcat")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def env_ints(name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    """Comma-separated integers from the environment (``_`` allowed as a digit separator)."""
    raw = os.environ.get(name, "").replace("_", "")
    return tuple(int(x) for x in raw.split(",") if x.strip()) or default


def value_of(partition: int, sequence: int) -> bytes:
    """The unique value of record ``sequence`` (0-based) of ``partition``."""
    return f"{partition}-{sequence}".encode().ljust(VALUE_BYTES, b".")


def check_values(values: Iterable[bytes], counts: Mapping[int, int]) -> dict[str, Any]:
    """What an output holds of the input ``counts`` (values as :func:`value_of` made them):
    ``records``, ``distinct``, ``duplicates``, ``missing`` (input values not in the output),
    ``unknown`` (values that are no input's) and ``gaps``: per partition, the input values
    missing below the highest sequence found. An exactly-once output of a query that is still
    running has no duplicates, unknowns or gaps (every partition's output is a prefix of its
    input); once the input is consumed, nothing is missing either."""
    records = 0
    seen: dict[int, set[int]] = {p: set() for p in counts}
    unknown = 0
    for value in values:
        records += 1
        partition, _, sequence = value.rstrip(b".").partition(b"-")
        try:
            p, s = int(partition), int(sequence)
        except ValueError:
            unknown += 1
            continue
        if p not in seen or not 0 <= s < counts[p]:
            unknown += 1
            continue
        seen[p].add(s)
    distinct = sum(len(s) for s in seen.values())
    return {
        "records": records,
        "distinct": distinct,
        "duplicates": records - unknown - distinct,
        "missing": sum(counts.values()) - distinct,
        "unknown": unknown,
        "gaps": sum(max(s) + 1 - len(s) for s in seen.values() if s),
    }


def uniform_counts(records: int) -> dict[int, int]:
    """``records`` spread evenly over the partitions (the remainder goes to the first ones)."""
    base, extra = divmod(records, PARTITIONS)
    return {p: base + (1 if p < extra else 0) for p in range(PARTITIONS)}


def skewed_counts(records: int) -> dict[int, int]:
    """Half of ``records`` in partition 0 (the hot partition), the rest spread over the others."""
    hot = records // 2
    base, extra = divmod(records - hot, PARTITIONS - 1)
    counts = {0: hot}
    counts.update({p: base + (1 if p - 1 < extra else 0) for p in range(1, PARTITIONS)})
    return counts


def produce(bootstrap: str, topic: str, counts: Mapping[int, int]) -> float:
    """Write ``counts[p]`` unique values to each partition ``p`` of ``topic``; returns seconds."""
    started = time.monotonic()
    procs = []
    for partition, count in counts.items():
        command = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-z", "none"]
        command += ["-X", "linger.ms=20", "-X", "batch.size=1000000"]
        proc = subprocess.Popen(command, stdin=subprocess.PIPE)
        assert proc.stdin is not None
        proc.stdin.write(b"\n".join(value_of(partition, i) for i in range(count)) + b"\n")
        proc.stdin.close()
        procs.append(proc)
    for proc in procs:
        if proc.wait() != 0:
            raise RuntimeError(f"kcat -P exited with {proc.returncode}")
    return time.monotonic() - started


def kcat_read_seconds(bootstrap: str, topic: str) -> float:
    """Seconds kcat takes to read the whole topic (the practical limit of a reader here)."""
    started = time.monotonic()
    subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q"],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return time.monotonic() - started


def machine_info(spark: Any, connector: Any) -> dict[str, Any]:
    """Cores, memory and the versions of everything measured (``connector``: the peer's
    :class:`benchmarks.peer_connector.PeerConnector`)."""
    from importlib.metadata import version

    import pyspark

    from unaligned.testing import shim_build

    with open("/proc/cpuinfo") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    broker_jars = [p.name for p in shim_build.ensure_built().classpath]
    here = Path(__file__).resolve().parent
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=here, capture_output=True, text=True
    ).stdout.strip()
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem_kb / 2**20, 1),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "java": spark._jvm.java.lang.System.getProperty("java.version"),
        "spark_sql_kafka": connector.spark_version,
        "peer_kafka_clients": connector.version_of("kafka-clients"),
        "kafka_python": version("kafka-python"),
        "broker": next((j[:-4] for j in broker_jars if j.startswith("kafka_2.13-")), "?"),
        "unaligned_commit": commit,
    }


def describe_machine(machine: Mapping[str, Any]) -> str:
    """One line for a figure's caption."""
    return (
        f"{machine['cpus']} cores ({machine['cpu_model']}), {machine['memory_gib']} GiB; "
        f"pyspark {machine['pyspark']}, Java {machine['java']}, broker {machine['broker']}, "
        f"peer spark-sql-kafka {machine['spark_sql_kafka']}, kafka-python "
        f"{machine['kafka_python']}, unaligned {machine['unaligned_commit']}"
    )
