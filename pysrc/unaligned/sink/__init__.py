"""The exactly-once sink: ``df.writeStream.format("unaligned")``.

- :mod:`.two_phase_commit` is the stream writer (pre-commit in tasks, decide and commit on the
  driver), built by :mod:`.stream_writer_factory`; :mod:`.participant` is the contract each
  target implements; :mod:`.recovery` decides, rolls forward and recovers; :mod:`.commit_log`
  keeps the durable decisions; :mod:`.options` parses the sink's options.
- Targets, one sub-package each: :mod:`.topics` (Kafka transactions) and :mod:`.files`
  (Parquet files with a manifest and Spark's ``_spark_metadata`` log).
"""
