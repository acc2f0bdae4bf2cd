"""What logging in costs: the source and Kafka -> Kafka over SASL_SSL against plaintext, ours
against Spark's own connector on the same listeners.

Run: ``./dev bench secured`` (or ``python -m benchmarks secured`` from ``integration/``). Prints a
table and writes ``integration/benchmarks/results/secured.json``. ``UNALIGNED_BENCH_RECORDS``
sets the size (default 1,000,000), ``UNALIGNED_BENCH_REPEATS`` the rounds (default 2).

Setup: one embedded broker with a ``SASL_SSL`` listener next to its plaintext one
(:mod:`unaligned.testing.secured_listeners`: TLS 1.3 with a certificate made for the run,
SCRAM-SHA-512 user) and one Spark session (``local[N]``, N = CPU count) with Spark's Kafka
connector on ``spark.jars`` (:mod:`benchmarks.peer_connector`). The input: records of 100-byte
values over 8 partitions (``kcat -P``, plaintext). In each round every contender runs once, in
turn, on each listener, so that the machine's noise hits them alike:

- ``source``: ``readStream`` -> ``writeStream.format("noop")``, ``maxOffsetsPerTrigger``
  250,000, ``trigger(availableNow=True)``: ours (``format("unaligned")``: on SASL_SSL its read
  tasks log in on their own sockets, :mod:`unaligned.kafka.fetch.fetch_connections`) and the
  peer (``format("kafka")``);
- ``kafka-to-kafka``: the same source into a Kafka sink on the same listener: ours exactly-once
  (``format("unaligned")``) and the peer's at-least-once ``format("kafka")``; each writes a fresh
  output topic.

Both contenders get the same options in Java's names (``kafka.security.protocol``,
``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location`` with type
PEM). Measured per query: records / wall time from ``start()`` to the end of
``awaitTermination()``. Reported: best of the rounds, and the ratios SASL_SSL / plaintext per
contender (what TLS and SASL cost it) and ours / peer per listener; the goal is that the first
ratio is no worse for ours than for the peer. The machine is shared (2 cores here): compare the
ratios of one run, not absolute figures across runs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import write_results
from benchmarks.compare.connectors import spark_session
from benchmarks.compare.inputs import (
    PARTITIONS,
    VALUE_BYTES,
    env_ints,
    machine_info,
    prepare_process,
    produce,
    uniform_counts,
)
from benchmarks.peer_connector import ensure_connector
from benchmarks.proc_cpu import spark_jvm_pid, timed_query

RECORDS = 1_000_000
MAX_OFFSETS_PER_TRIGGER = 250_000
WARMUP_RECORDS = 80_000
USER, PASSWORD = "bench", "bench-secret"
CONTENDERS = ("peer", "ours")
WORKLOADS = ("source", "kafka-to-kafka")
LISTENERS = ("plaintext", "sasl_ssl")
_FORMATS = {"peer": "kafka", "ours": "unaligned"}


def listener_options(kafka: Any, listener: str, ca_pem: Path) -> dict[str, str]:
    """The ``kafka.*`` options of ``listener``, as both contenders take them."""
    if listener == "plaintext":
        return {"kafka.bootstrap.servers": kafka.bootstrap_servers}
    return {
        "kafka.bootstrap.servers": kafka.listener_bootstrap("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{USER}" password="{PASSWORD}";'
        ),
        "kafka.ssl.truststore.location": str(ca_pem),
        "kafka.ssl.truststore.type": "PEM",
    }


def run_query(
    spark: Any,
    kafka: Any,
    jvm_pid: int,
    run: tuple[str, str, str],
    topic: str,
    options: dict[str, str],
    work: Path,
) -> dict[str, Any]:
    """One query of ``run`` = (workload, contender, listener) over ``topic``."""
    workload, contender, listener = run
    records = sum(kafka.end_offsets(topic).values())
    reader = spark.readStream.format(_FORMATS[contender]).option("subscribe", topic)
    reader = reader.option("startingOffsets", "earliest")
    reader = reader.option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER))
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load().select("value", "partition")
    name = f"{workload}-{contender}-{listener}-{os.urandom(4).hex()}"
    if workload == "source":
        writer = df.writeStream.format("noop")
    else:
        kafka.create_topic(name, partitions=PARTITIONS)
        writer = df.writeStream.format(_FORMATS[contender]).option("topic", name)
        for key, value in options.items():
            writer = writer.option(key, value)
    writer = writer.option("checkpointLocation", str(work / f"checkpoint-{name}"))
    timed = timed_query(writer.trigger(availableNow=True), jvm_pid, kafka.broker_pid)
    if timed.query.exception() is not None:
        raise RuntimeError(f"{name} failed: {timed.query.exception()}")
    rows = sum(p["numInputRows"] for p in timed.query.recentProgress)
    if rows != records:
        raise RuntimeError(f"{name}: read {rows} records, expected {records}")
    if workload != "source":
        written = sum(kafka.end_offsets(name).values())
        if written < records:
            raise RuntimeError(f"{name}: {written} offsets written, expected >= {records}")
        kafka.delete_topic(name)
    return {
        "workload": workload,
        "contender": contender,
        "listener": listener,
        "records": records,
        "wall_s": round(timed.wall_s, 2),
        "records_per_s_wall": round(records / timed.wall_s),
        "python_workers_cpu_s_per_million": round(timed.cpu.python_workers_s * 1e6 / records, 2),
        "spark_jvm_cpu_s_per_million": round(timed.cpu.jvm_s * 1e6 / records, 2),
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Best records/s per (workload, contender, listener) and the ratios."""
    best: dict[str, dict[str, dict[str, int]]] = {}
    for r in runs:
        slot = best.setdefault(r["workload"], {}).setdefault(r["contender"], {})
        slot[r["listener"]] = max(slot.get(r["listener"], 0), r["records_per_s_wall"])
    ratios: dict[str, Any] = {}
    for workload, by_contender in best.items():
        ratios[workload] = {
            "sasl_ssl_over_plaintext": {
                c: round(v["sasl_ssl"] / v["plaintext"], 3) for c, v in by_contender.items()
            },
            "ours_over_peer": {
                listener: round(by_contender["ours"][listener] / by_contender["peer"][listener], 3)
                for listener in LISTENERS
            },
        }
    return {"best_records_per_s_wall": best, "ratios": ratios}


def _print_table(summary: dict[str, Any]) -> None:
    print(f"{'workload':<15} {'contender':<9} {'plaintext':>11} {'SASL_SSL':>11} {'ratio':>6}")
    for workload, by_contender in summary["best_records_per_s_wall"].items():
        for contender, v in by_contender.items():
            ratio = summary["ratios"][workload]["sasl_ssl_over_plaintext"][contender]
            print(
                f"{workload:<15} {contender:<9} {v['plaintext']:>11,} {v['sasl_ssl']:>11,}"
                f" {ratio:>6.2f}"
            )
        ours_peer = summary["ratios"][workload]["ours_over_peer"]
        print(
            f"{'':<15} ours/peer: plaintext {ours_peer['plaintext']:.2f}, "
            f"SASL_SSL {ours_peer['sasl_ssl']:.2f}"
        )
    print("records/s, wall: best of the rounds; ratio: SASL_SSL / plaintext")


def main() -> dict[str, Any]:
    prepare_process()
    from unaligned.testing import EmbeddedKafka
    from unaligned.testing.secured_listeners import BrokerSecurity
    from unaligned.testing.tls_material import make_tls_material

    connector = ensure_connector()
    records = env_ints("UNALIGNED_BENCH_RECORDS", (RECORDS,))[0]
    records -= records % PARTITIONS
    repeats = env_ints("UNALIGNED_BENCH_REPEATS", (2,))[0]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-secured-") as tmp:
        work = Path(tmp)
        tls = make_tls_material(work / "tls")
        security = BrokerSecurity(tls, {USER: PASSWORD})
        with EmbeddedKafka(data_dir=work / "kafka", security=security) as kafka:
            spark = spark_session("bench-secured", connector.spark_jars())
            try:
                jvm_pid = spark_jvm_pid(kafka.broker_pid)
                machine = machine_info(spark, connector)
                print(f"machine: {machine}", flush=True)
                options = {lis: listener_options(kafka, lis, tls.ca_pem) for lis in LISTENERS}
                kafka.create_topic("warmup", partitions=PARTITIONS)
                produce(kafka.bootstrap_servers, "warmup", uniform_counts(WARMUP_RECORDS))
                plan = [(w, c, lis) for w in WORKLOADS for c in CONTENDERS for lis in LISTENERS]
                for run in plan:  # JIT, Python workers, connections: not counted
                    run_query(spark, kafka, jvm_pid, run, "warmup", options[run[2]], work)
                kafka.create_topic("input", partitions=PARTITIONS)
                produce_s = produce(kafka.bootstrap_servers, "input", uniform_counts(records))
                print(f"produced {records:,} records in {produce_s:.1f} s", flush=True)
                for i in range(repeats):
                    for run in plan:
                        result = run_query(
                            spark, kafka, jvm_pid, run, "input", options[run[2]], work
                        )
                        runs.append(result)
                        print(
                            f"  round {i} {'/'.join(run):<30} "
                            f"{result['records_per_s_wall']:>9,} records/s "
                            f"({result['wall_s']} s)",
                            flush=True,
                        )
            finally:
                spark.stop()
    summary = summarise(runs)
    _print_table(summary)
    report = {
        "benchmark": "secured",
        "records": records,
        "partitions": PARTITIONS,
        "value_bytes": VALUE_BYTES,
        "max_offsets_per_trigger": MAX_OFFSETS_PER_TRIGGER,
        "sasl_ssl": "TLS (certificate made for the run) + SASL SCRAM-SHA-512",
        "repeats": repeats,
        "machine": machine,
        **summary,
        "runs": runs,
    }
    write_results("secured", report)
    return report
