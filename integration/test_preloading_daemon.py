"""``spark.python.daemon.module=unaligned.tuning.preloading_daemon`` on a real Spark application:
task workers fork from our daemon with pyspark's worker, kafka-python and our thread-free task
modules already imported, and
a read through the source returns every record (a separate application: the setting is read
when the SparkContext starts, and the shared session has started without it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TopicFactory
from unaligned.testing import EmbeddedKafka

pytestmark = pytest.mark.slow

APP = """
import json, os, sys
from pyspark.sql import SparkSession
bootstrap, topic = sys.argv[1:]
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.python.daemon.module", "unaligned.tuning.preloading_daemon").getOrCreate())

def in_worker(_):
    parent = open(f"/proc/{os.getppid()}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
    ours = "unaligned.kafka.fetch.range_fetch" in sys.modules  # imported by no map task
    return [parent, "kafka.admin" in sys.modules, "pyspark.worker" in sys.modules, ours]

report = {"worker": spark.sparkContext.parallelize([0], 1).map(in_worker).collect()[0]}
rows = (spark.read.format("unaligned").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic).load().select("value").collect())
report["values"] = sorted(int(r.value) for r in rows)
print("REPORT", json.dumps(report))
"""


def test_tasks_run_in_workers_forked_from_the_preloading_daemon(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    kafka.produce(topic, [(i % 2, None, str(i).encode(), None, None) for i in range(500)])
    script = tmp_path / "app.py"
    script.write_text(APP)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, str(script), kafka.bootstrap_servers, topic],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("REPORT ")]
    report = json.loads(line.removeprefix("REPORT "))
    parent, kafka_loaded, worker_loaded, ours_loaded = report["worker"]
    assert "unaligned.tuning.preloading_daemon" in parent
    assert kafka_loaded and worker_loaded and ours_loaded
    assert report["values"] == list(range(500))  # every record once
