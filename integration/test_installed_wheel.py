"""Installed as a user installs it: the wheel built by ``python -m build``, installed into a fresh
virtual environment with no checkout on any path.

- A real query (Kafka -> ``format("unaligned")`` -> the exactly-once Kafka sink,
  ``availableNow``) runs in the new environment's Python, which finds the format by itself (the
  installed ``pyspark_unaligned`` module, no ``register`` call); every record is read back by an
  independent read_committed reader (kcat).
- ``unaligned broker`` from that environment builds the broker's launcher from the wheel's
  package data in a user cache directory, prints its bootstrap address, serves a transactional
  produce and a read_committed consume, and exits 0 on SIGINT.

- the packed environment of docs/guides/clusters.md (venv-pack,
  ``--archives env.tar.gz#environment``) runs a query on a standalone master and worker
  exactly once.

pip reuses its cache: on 2 cores the environment took 18 s to make, the query 16 s, the broker
16 s (its first build included), the packed environment 55 s.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import kcat_read_committed
from kafka import KafkaConsumer, KafkaProducer
from unaligned.testing import EmbeddedKafka

pytestmark = pytest.mark.slow

CHECKOUT = Path(__file__).resolve().parents[1]
RECORDS = 300

QUERY = """
import sys, unaligned
from pyspark.sql import SparkSession
bootstrap, source, output, checkpoint = sys.argv[1:]
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
assert unaligned.__file__.startswith(sys.prefix), unaligned.__file__
(spark.readStream.format("unaligned").option("kafka.bootstrap.servers", bootstrap)
 .option("subscribe", source).option("startingOffsets", "earliest").load()
 .select("key", "value").writeStream.format("unaligned")
 .option("kafka.bootstrap.servers", bootstrap).option("topic", output)
 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
 .awaitTermination())
print("query ended", unaligned.__version__)
"""


def _clean_env(venv_dir: Path) -> dict[str, str]:
    """The environment of a user who only installed the wheel: no PYTHONPATH, no jvm-shim
    override, the new environment's Python for Spark's workers."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "UNALIGNED_JVM_SHIM_DIR", "VIRTUAL_ENV")
    }
    python = str(venv_dir / "bin" / "python")
    env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    env["PATH"] = f"{venv_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, f"{command}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@dataclass(frozen=True)
class Installed:
    venv_dir: Path
    env: dict[str, str]

    @property
    def python(self) -> str:
        return str(self.venv_dir / "bin" / "python")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """The wheel built from this checkout, installed into a new virtual environment."""
    work = tmp_path_factory.mktemp("wheel")
    dist = work / "dist"
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(CHECKOUT)], cwd=work)
    wheels = sorted(dist.glob("unaligned-*.whl"))
    assert len(wheels) == 1 and len(list(dist.glob("unaligned-*.tar.gz"))) == 1
    venv_dir = work / "env"
    # copies, not links to this machine's interpreter: the docs' packed environment is made so
    venv.EnvBuilder(with_pip=True, symlinks=False).create(venv_dir)
    env = _clean_env(venv_dir)
    _run(
        [str(venv_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheels[0])],
        cwd=work,
        env=env,
    )
    yield Installed(venv_dir, env)
    shutil.rmtree(venv_dir, ignore_errors=True)  # about 1 GB (pyspark)


def test_the_installed_wheel_runs_a_query_exactly_once(
    installed: Installed, kafka: EmbeddedKafka, tmp_path: Path
) -> None:
    import unaligned

    version = _run(
        [str(installed.venv_dir / "bin" / "unaligned"), "--version"], tmp_path, installed.env
    )
    assert version.strip() == f"unaligned {unaligned.__version__}"

    source, output = "wheel-input", "wheel-output"
    kafka.create_topic(source, partitions=2)
    kafka.create_topic(output, partitions=2)
    values = [f"wheel-{i}".encode() for i in range(RECORDS)]
    kafka.produce(source, ((i % 2, None, v, None, None) for i, v in enumerate(values)))
    (tmp_path / "query.py").write_text(QUERY)
    out = _run(
        [
            installed.python,
            "query.py",
            kafka.bootstrap_servers,
            source,
            output,
            str(tmp_path / "cp"),
        ],
        cwd=tmp_path,  # not the checkout: nothing of it can be imported
        env=installed.env,
    )
    assert f"query ended {unaligned.__version__}" in out

    read = [r["value"].encode() for r in kcat_read_committed(kafka.bootstrap_servers, output)]
    assert len(read) == RECORDS
    assert sorted(read) == sorted(values)


def test_unaligned_broker_from_the_installed_wheel_serves_until_ctrl_c(
    installed: Installed, tmp_path: Path
) -> None:
    env = {**installed.env, "UNALIGNED_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [str(installed.venv_dir / "bin" / "unaligned"), "broker", "--port", "0", "--topic", "t:2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("Kafka is ready: bootstrap servers "):
                break
        bootstrap = seen[-1].split()[-1] if seen else ""
        assert bootstrap.startswith("127.0.0.1:"), "".join(seen)
        assert any(line.strip().startswith("built in ") for line in seen), "".join(seen)
        # no Maven noise on a first start: no jar-by-jar progress, no offline-then-online retry
        assert not any("fetched " in line and ".jar" in line for line in seen), "".join(seen)
        assert not any("retrying online" in line for line in seen), "".join(seen)
        assert list((tmp_path / "cache").glob("jvm-shim-*/target/unaligned-jvm-shim-*.jar"))

        producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="quick-start")
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.send("t", value=f"r{i}".encode(), partition=i % 2)
        producer.commit_transaction()
        producer.close()
        consumer = KafkaConsumer(
            "t",
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            consumer_timeout_ms=5000,
        )
        values = sorted(record.value for record in consumer)
        consumer.close()
        assert values == sorted(f"r{i}".encode() for i in range(10))
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    assert rest.rstrip().endswith("stopped"), rest


PACKED_APP = """
import sys
from pyspark.sql import SparkSession
bootstrap, source, output, checkpoint = sys.argv[1:]
spark = SparkSession.builder.getOrCreate()
(spark.readStream.format("unaligned").option("kafka.bootstrap.servers", bootstrap)
 .option("subscribe", source).option("startingOffsets", "earliest").load()
 .select("key", "value").writeStream.format("unaligned")
 .option("kafka.bootstrap.servers", bootstrap).option("topic", output)
 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
 .awaitTermination())
print("packed app ended")
"""


def test_a_packed_environment_runs_a_query_on_a_standalone_cluster_exactly_once(
    installed: Installed, kafka: EmbeddedKafka, tmp_path: Path
) -> None:
    """docs/guides/clusters.md, client mode: venv-pack the installed environment,
    ship it with ``--archives env.tar#environment``, ``PYSPARK_PYTHON=./environment/bin/python``
    exported, the archive also unpacked where ``spark-submit`` runs (the driver's Python data
    source processes run the same relative path). A master and one worker (cluster.py)."""
    from cluster import StandaloneCluster

    _run(
        [installed.python, "-m", "pip", "install", "--quiet", "venv-pack"], tmp_path, installed.env
    )
    # .tar.gz: Spark unpacks a plain .tar without file modes (python not executable); level 1
    # packs the 0.9 GB environment in about 15 s instead of 20
    archive = tmp_path / "env.tar.gz"
    _run(
        [str(installed.venv_dir / "bin" / "venv-pack"), "-p", str(installed.venv_dir)]
        + ["-o", str(archive), "--compress-level", "1", "-q"],
        tmp_path,
        installed.env,
    )
    submit_dir = tmp_path / "submit"
    (submit_dir / "environment").mkdir(parents=True)
    _run(["tar", "-xzf", str(archive), "-C", str(submit_dir / "environment")], tmp_path)
    (submit_dir / "app.py").write_text(PACKED_APP)
    source, output = "packed-input", "packed-output"
    kafka.create_topic(source, partitions=2)
    kafka.create_topic(output, partitions=2)
    values = [f"packed-{i}".encode() for i in range(RECORDS)]
    kafka.produce(source, ((i % 2, None, v, None, None) for i, v in enumerate(values)))
    env = {
        **installed.env,
        "PYSPARK_PYTHON": "./environment/bin/python",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
    }
    for name in ("PYSPARK_DRIVER_PYTHON", "SPARK_HOME"):
        env.pop(name, None)

    try:
        with StandaloneCluster(tmp_path / "cluster", workers=1, cores=1) as cluster:
            out = _run(
                [str(installed.venv_dir / "bin" / "spark-submit"), "--master", cluster.master_url]
                + ["--archives", f"{archive}#environment"]
                + ["--conf", "spark.pyspark.driver.python=./environment/bin/python"]
                + ["--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=1g"]
                + ["app.py", kafka.bootstrap_servers, source, output, str(tmp_path / "cp")],
                cwd=submit_dir,
                env=env,
            )
            unpacked = list((tmp_path / "cluster").glob("work-*/*/*/environment/bin/python"))
    finally:  # three copies of a 0.9 GB environment: not left for pytest's kept directories
        archive.unlink(missing_ok=True)
        for copies in (submit_dir / "environment", tmp_path / "cluster"):
            shutil.rmtree(copies, ignore_errors=True)
    assert "packed app ended" in out
    assert unpacked, "no executor unpacked the archive"
    read = [r["value"].encode() for r in kcat_read_committed(kafka.bootstrap_servers, output)]
    assert len(read) == RECORDS
    assert sorted(read) == sorted(values)
