"""The demo's query, run in a process of its own so that the demo can kill it hard.

``python -m unaligned.demo.query_run '<json>'`` with keys ``bootstrap``, ``input_topic``,
``output_topic``, ``checkpoint``, ``max_offsets``: Kafka -> ``format("unaligned")`` (bounded:
``endingOffsets=latest``, resolved once when the query first starts) -> the exactly-once Kafka
sink with unaligned checkpoints (``alignedCheckpointTimeout=1s``), under a processing-time
trigger; ``unaligned.await_finished`` stops it once the final checkpoint committed. Exit 0 then.
The demo starts it with ``start_new_session=True`` and kills the whole session
(:func:`unaligned._util.crash_points.kill_session`) to show a crash.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

ALIGNED_CHECKPOINT_TIMEOUT = "1s"


def run(config: dict[str, Any]) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import unaligned

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("unaligned-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    query = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", config["bootstrap"])
        .option("subscribe", config["input_topic"])
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("includeHeaders", "true")
        .option("maxOffsetsPerTrigger", str(config["max_offsets"]))
        .load()
        .select("key", "value", "headers", "partition")
        .writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", config["bootstrap"])
        .option("topic", config["output_topic"])
        .option("checkpointLocation", config["checkpoint"])
        .option("alignedCheckpointTimeout", ALIGNED_CHECKPOINT_TIMEOUT)
        .option("chunkRows", "100")
        .option("maxUnacknowledgedBytes", "65536")
        .trigger(processingTime="1 second")
        .start()
    )
    finished = unaligned.await_finished(query, config["checkpoint"], timeout_s=600)
    spark.stop()
    return 0 if finished else 1


if __name__ == "__main__":
    sys.exit(run(json.loads(sys.argv[1])))
