"""Run one Kafka -> format("unaligned") -> format("unaligned") query to the end of its input.

Started by the crash tests in a subprocess with ``start_new_session=True``::

    python integration/query_runner.py '<json config>'

Config keys: ``bootstrap`` (servers), ``input_topic``, ``checkpoint``, ``max_offsets`` (per
trigger), and either ``output_topic`` (Kafka sink; each record goes to the partition number it
was read from), ``output_path`` (file sink) or neither (an Iceberg or Delta table, named by
``tableFormat`` and ``path`` in ``extra_sink_options``). Optional: ``master`` (default
``local[2,3]``: two cores, a failed task is retried up to 3 times), ``extra_sink_options``.

The query uses ``trigger(availableNow=True)`` and ends when the input is consumed. Before Spark
starts, the runner exports its session id as ``UNALIGNED_CRASH_SESSION``: an armed crash point
(``UNALIGNED_CRASH_AT`` in the environment) then kills the runner, the JVM and every Python worker
in one go. Exit status 0 means the query finished; a crash shows as -9 (SIGKILL) to the caller.
The last stdout line is a JSON summary.

Optional keys for real-cluster fault tests (``integration/test_cluster_faults.py``; helpers in
``integration/cluster.py``):

``master``
    Also ``local-cluster[2,1,1024]`` (two executor JVMs with their own Python workers, launched
    by standalone workers inside the driver JVM) or ``spark://host:port``. For both the runner
    binds Spark to loopback (``SPARK_LOCAL_IP``/``spark.driver.host`` 127.0.0.1) and, unless
    ``SPARK_HOME`` is set in its environment, points ``SPARK_HOME`` at a private copy (symlinks)
    of the pip-installed pyspark package: ``<work_dir>/spark-home``, whose ``work/`` then holds
    every executor's log (``work/<app-id>/<executor-id>/stderr``) instead of site-packages.
``work_dir``
    Where the runner keeps its Spark home and the log4j configuration (default: a
    ``spark-work`` directory next to ``checkpoint``).
``spark_conf``
    ``{key: value}`` extra Spark confs set on the session builder, applied last, e.g.
    ``spark.speculation``, ``spark.speculation.multiplier``, ``spark.speculation.quantile``,
    ``spark.task.maxFailures``, ``spark.sql.shuffle.partitions``.
``source_options``
    ``{key: value}`` extra ``readStream`` options (after the defaults, so they override them).
``slow_partition``, ``slow_ms_per_row``
    A ``mapInArrow`` step before the sink sleeps ``slow_ms_per_row`` ms for every row whose
    ``partition`` column (the Kafka partition it was read from) equals ``slow_partition``.
    Columns stay ``key, value, partition, offset``. ``slow_attempts``: ``all`` (default: every
    task attempt is slow) or ``first`` (only attempt 0 of a task sleeps, so a speculative copy
    or a retry runs at full speed). ``slow_batches``: only these batch ids are slow (default:
    all).
``task_marker_dir``
    The same ``mapInArrow`` step (added also without ``slow_partition``) writes one file per
    task attempt as it receives its first rows, named
    ``b<batch>-s<stage>-p<partition>.<attempt>-tid<taskAttemptId>-pid<pid>`` with a JSON body of
    the same fields and ``time``: tests use it to time a kill and to find the executor that runs
    a given task (the pid is the Python worker's). Python's ``TaskContext`` has no stage attempt
    number: join ``tid`` with the ``driver_log`` task starts (``TID n``) for it.
``shuffle_before_sink``
    ``true`` or a column name: ``repartition(spark.sql.shuffle.partitions, <column>)`` before
    the sink, so the sink's stage reads a shuffle. ``true`` means the ``partition`` column: every
    record keeps its ``partition`` (the Kafka sink routes it to that partition number) and all
    records of one input partition meet in one sink task, in input order, so per-partition order
    stays checkable; ``"key"`` spreads a partition's records over the sink tasks. The
    ``mapInArrow`` step runs after the shuffle unless ``slow_stage`` is ``"source"``.
``trigger``
    ``"availableNow"`` (default) or a processing-time interval such as ``"2 seconds"``. With a
    processing-time trigger the runner stops the query once ``stop_after_rows`` input rows
    were processed (required) and the sink's latest commit record leaves no channel state
    pending, or fails after ``timeout_s`` (default 240).
``driver_log``
    Path of a file that gets the driver's scheduler log at INFO (``DAGScheduler``,
    ``TaskSetManager``, ``TaskSchedulerImpl``, standalone executor events): task starts with
    ``stage.attempt`` numbers, speculation, fetch failures and stage resubmissions.
``until``
    With a processing-time ``trigger``: ``"finished"`` waits in ``unaligned.await_finished``
    (bounded input, or a drain honoured at restart); ``"drain"`` / ``"stop"`` call
    ``unaligned.stop(query, checkpoint, drain=...)`` once ``stop_after_rows`` input rows went
    through (the summary gets ``stop_s``, the time the stop took). ``timeout_s`` bounds both.
``status_file``
    Path of a JSON file written once the session is up: ``app_id``, ``driver_pid`` (the
    runner), ``session`` (its session id), ``spark_home``, ``master``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from unaligned.checkpoint import Checkpoint

_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss.SSS}} %p %c{{1}}: %m%n%ex
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss.SSS}} %p %c{{1}}: %m%n%ex
logger.scheduler.name = org.apache.spark.scheduler
logger.scheduler.level = info
logger.scheduler.appenderRef.file.ref = file
logger.standalone.name = org.apache.spark.scheduler.cluster
logger.standalone.level = info
logger.deploy.name = org.apache.spark.deploy
logger.deploy.level = info
logger.deploy.appenderRef.file.ref = file
logger.tracker.name = org.apache.spark.MapOutputTrackerMaster
logger.tracker.level = info
logger.tracker.appenderRef.file.ref = file
"""


def _is_cluster(master: str) -> bool:
    return master.startswith("local-cluster") or master.startswith("spark://")


def _prepare_cluster_env(config: dict[str, Any], work_dir: Path) -> None:
    """Loopback only; a private Spark home (see the module docstring)."""
    import cluster

    cluster.loopback_env(os.environ)  # type: ignore[arg-type]
    if "SPARK_HOME" not in os.environ:
        os.environ["SPARK_HOME"] = str(cluster.spark_home(work_dir / "spark-home"))


def _marker_step(config: dict[str, Any]) -> Any:
    """The mapInArrow function: sleep on the slow partition, write a task marker."""
    slow_partition = config.get("slow_partition")
    delay_s = float(config.get("slow_ms_per_row", 0)) / 1000.0
    first_only = config.get("slow_attempts", "all") == "first"
    slow_batches = config.get("slow_batches")
    marker_dir = config.get("task_marker_dir")

    def step(batches: Any) -> Any:
        import json as _json
        import os as _os
        import time as _time

        import pyarrow.compute as pc
        from pyspark import TaskContext

        context = TaskContext.get()
        marked = False
        slow = slow_partition is not None and delay_s > 0
        if slow and first_only and context.attemptNumber() != 0:
            slow = False
        batch_id = int(context.getLocalProperty("streaming.sql.batchId") or -1)
        if slow and slow_batches is not None and batch_id not in slow_batches:
            slow = False
        for batch in batches:
            if marker_dir and not marked and batch.num_rows:
                marked = True
                info = {
                    "batch": batch_id,
                    "stage": context.stageId(),
                    "partition": context.partitionId(),
                    "attempt": context.attemptNumber(),
                    "tid": context.taskAttemptId(),
                    "pid": _os.getpid(),
                    "time": _time.time(),
                }
                name = (
                    f"b{info['batch']}-s{info['stage']}"
                    f"-p{info['partition']}.{info['attempt']}-tid{info['tid']}-pid{info['pid']}"
                )
                tmp = _os.path.join(marker_dir, f".{name}.tmp")
                with open(tmp, "w") as fh:
                    fh.write(_json.dumps(info))
                _os.replace(tmp, _os.path.join(marker_dir, name))
            if slow:
                hits = pc.sum(pc.equal(batch.column("partition"), slow_partition)).as_py() or 0
                if hits:
                    # Yield row by row so the sink sees the slow rows trickle in.
                    for i in range(batch.num_rows):
                        row = batch.slice(i, 1)
                        if row.column("partition")[0].as_py() == slow_partition:
                            _time.sleep(delay_s)
                        yield row
                    continue
            yield batch

    return step


def _await_rows(query: Any, config: dict[str, Any]) -> None:
    """Processing-time trigger: stop once ``stop_after_rows`` rows went through and nothing is
    left pending in the sink's channel state."""
    from unaligned.sink.commit_log import CommitLog

    target = int(config["stop_after_rows"])
    deadline = time.monotonic() + float(config.get("timeout_s", 240))
    log = CommitLog(Checkpoint.resolve(config["checkpoint"]))
    while True:
        if query.exception() is not None:
            raise query.exception()
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        if rows >= target:
            decided = log.decided_batch_ids()
            latest = log.read(decided[-1]) if decided else None
            if latest is not None and not latest.channel_state and log.is_done(latest.batch_id):
                break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{rows} of {target} rows after {config.get('timeout_s', 240)} s")
        time.sleep(0.5)
    query.stop()


def _until(query: Any, config: dict[str, Any]) -> dict[str, Any]:
    """``until``: ``finished`` (``unaligned.await_finished``), or ``drain`` / ``stop``
    (``unaligned.stop`` with or without drain once ``stop_after_rows`` rows went through)."""
    import unaligned

    timeout = float(config.get("timeout_s", 240))
    checkpoint = config["checkpoint"]
    if config["until"] == "finished":
        if not unaligned.await_finished(query, checkpoint, timeout_s=timeout):
            raise TimeoutError(f"the query did not finish within {timeout} s")
        return {"finished": True}
    target = int(config["stop_after_rows"])
    deadline = time.monotonic() + timeout
    while sum(p["numInputRows"] for p in query.recentProgress) < target:
        if query.exception() is not None:
            raise query.exception()
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {target} rows after {timeout} s")
        time.sleep(0.2)
    asked = time.monotonic()
    unaligned.stop(query, checkpoint, drain=config["until"] == "drain", timeout_s=timeout)
    return {"stop_s": round(time.monotonic() - asked, 2)}


def main(config: dict[str, Any]) -> int:
    os.environ["UNALIGNED_CRASH_SESSION"] = str(os.getsid(0))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    master = config.get("master", "local[2,3]")
    work_dir = Path(config.get("work_dir") or Path(config["checkpoint"]).parent / "spark-work")
    driver_java_options = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    if _is_cluster(master):
        work_dir.mkdir(parents=True, exist_ok=True)
        _prepare_cluster_env(config, work_dir)
    if config.get("driver_log"):
        work_dir.mkdir(parents=True, exist_ok=True)
        log4j = work_dir / "log4j2-driver.properties"
        log4j.write_text(_LOG4J.format(log=config["driver_log"]))
        driver_java_options += f" -Dlog4j2.configurationFile=file:{log4j}"

    from pyspark.sql import SparkSession

    started = time.monotonic()
    builder = (
        SparkSession.builder.master(master)
        .appName("unaligned-crash-runner")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.driver.memory", "1g")
        # Short-lived JVM: C1 only and the serial collector start several seconds faster.
        .config("spark.driver.extraJavaOptions", driver_java_options)
    )
    if _is_cluster(master):
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.executor.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        )
    for key, value in config.get("spark_conf", {}).items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if config.get("status_file"):
        status = {
            "app_id": spark.sparkContext.applicationId,
            "driver_pid": os.getpid(),
            "session": os.getsid(0),
            "spark_home": os.environ.get("SPARK_HOME"),
            "master": master,
            "startup_s": round(time.monotonic() - started, 1),
        }
        tmp = f"{config['status_file']}.tmp"
        Path(tmp).write_text(json.dumps(status))
        os.replace(tmp, config["status_file"])
    reader = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", config["bootstrap"])
        .option("subscribe", config["input_topic"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(config["max_offsets"]))
    )
    for key, value in config.get("source_options", {}).items():
        reader = reader.option(key, str(value))
    source = reader.load().select("key", "value", "partition", "offset")

    shuffle = config.get("shuffle_before_sink")
    marker_needed = config.get("slow_partition") is not None or config.get("task_marker_dir")
    schema = "key binary, value binary, partition int, offset long"
    if marker_needed and (not shuffle or config.get("slow_stage") == "source"):
        source = source.mapInArrow(_marker_step(config), schema)
    if shuffle:
        column = "partition" if shuffle is True else str(shuffle)
        partitions = int(spark.conf.get("spark.sql.shuffle.partitions") or 2)
        source = source.repartition(partitions, column)
        if marker_needed and config.get("slow_stage") != "source":
            source = source.mapInArrow(_marker_step(config), schema)

    writer = source.writeStream.format("unaligned")
    if "output_topic" in config:
        writer = writer.option("kafka.bootstrap.servers", config["bootstrap"]).option(
            "topic", config["output_topic"]
        )
        # Kafka sink takes key/value/partition; offset is ignored (extra columns are allowed).
    elif "output_path" in config:
        writer = writer.option("path", config["output_path"])
    # neither: the target is in extra_sink_options (tableFormat and path: Iceberg, Delta)
    for key, value in config.get("extra_sink_options", {}).items():
        writer = writer.option(key, value)
    trigger = config.get("trigger", "availableNow")
    writer = writer.option("checkpointLocation", config["checkpoint"]).queryName("crash_runner")
    ending: dict[str, Any] = {}
    if config.get("until"):
        query = writer.trigger(processingTime=trigger).start()
        ending = _until(query, config)
    elif trigger == "availableNow":
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = writer.trigger(processingTime=trigger).start()
        _await_rows(query, config)
    progress = query.recentProgress
    summary = {
        "query_id": str(query.id),
        "batches": [p["batchId"] for p in progress],
        "rows": [p["numInputRows"] for p in progress],
        "duration_ms": [p["durationMs"] for p in progress],
        "seconds": round(time.monotonic() - started, 1),
        **ending,
    }
    spark.stop()
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
