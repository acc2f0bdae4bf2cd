"""The file target of the sink: Parquet files that appear whole to every reader.

:mod:`.file_participant` is the target (pre-commit staged files, commit by rename), tasks write
through :mod:`.file_task_writer` and small batches merge in :mod:`.file_merge`; names, the
manifest and its compaction are :mod:`.file_manifest` and :mod:`.manifest_compaction`, Spark's
``_spark_metadata`` log is :mod:`.spark_metadata_log`; :mod:`.committed_files` reads the
committed files back and :mod:`.output_survey` finds orphans for ``unaligned inspect``.
"""
