"""The exactly-once sink: ``df.writeStream.format("unaligned")``.

- :mod:`.two_phase_commit` is the stream writer (pre-commit in tasks, decide and commit on the
  driver), built by :mod:`.stream_writer_factory`; :mod:`.participant` is the contract each
  target implements; :mod:`.recovery` decides, rolls forward and recovers; :mod:`.commit_log`
  keeps the durable decisions.
- Targets: :mod:`.kafka_participant` (Kafka transactions, input columns in
  :mod:`.kafka_columns`) and :mod:`.file_participant` (Parquet files; names, manifest and
  compaction in :mod:`.file_manifest`; read back with :mod:`.committed_files`).
"""
