"""Run one Kafka -> format("unaligned") -> format("unaligned") query to the end of its input.

Started by the crash tests in a subprocess with ``start_new_session=True``::

    python integration/query_runner.py '<json config>'

Config keys: ``bootstrap`` (servers), ``input_topic``, ``checkpoint``, ``max_offsets`` (per
trigger), and either ``output_topic`` (Kafka sink; each record goes to the partition number it
was read from) or ``output_path`` (file sink). Optional: ``master`` (default ``local[2,3]``: two
cores, a failed task is retried up to 3 times), ``extra_sink_options``.

The query uses ``trigger(availableNow=True)`` and ends when the input is consumed. Before Spark
starts, the runner exports its session id as ``UNALIGNED_CRASH_SESSION``: an armed crash point
(``UNALIGNED_CRASH_AT`` in the environment) then kills the runner, the JVM and every Python worker
in one go. Exit status 0 means the query finished; a crash shows as -9 (SIGKILL) to the caller.
The last stdout line is a JSON summary.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main(config: dict[str, Any]) -> int:
    os.environ["UNALIGNED_CRASH_SESSION"] = str(os.getsid(0))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    started = time.monotonic()
    spark = (
        SparkSession.builder.master(config.get("master", "local[2,3]"))
        .appName("unaligned-crash-runner")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.driver.memory", "1g")
        # Short-lived JVM: C1 only and the serial collector start several seconds faster.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    source = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", config["bootstrap"])
        .option("subscribe", config["input_topic"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(config["max_offsets"]))
        .load()
    )
    writer = source.select("key", "value", "partition", "offset").writeStream.format("unaligned")
    if "output_topic" in config:
        writer = writer.option("kafka.bootstrap.servers", config["bootstrap"]).option(
            "topic", config["output_topic"]
        )
        # Kafka sink takes key/value/partition; offset is ignored (extra columns are allowed).
    else:
        writer = writer.option("path", config["output_path"])
    for key, value in config.get("extra_sink_options", {}).items():
        writer = writer.option(key, value)
    query = (
        writer.option("checkpointLocation", config["checkpoint"])
        .queryName("crash_runner")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    progress = query.recentProgress
    summary = {
        "query_id": str(query.id),
        "batches": [p["batchId"] for p in progress],
        "rows": [p["numInputRows"] for p in progress],
        "duration_ms": [p["durationMs"] for p in progress],
        "seconds": round(time.monotonic() - started, 1),
    }
    spark.stop()
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
