"""The source's driver side, batch by batch: :mod:`.batch_planning` answers Spark's calls
(offsets, read limits, partitions); :mod:`.partition_discovery` and :mod:`.position_resolution`
find topic-partitions and resolve starting and ending positions; :mod:`.batch_sizing`,
:mod:`.byte_limit` and :mod:`.backlog_limit` size a batch; :mod:`.range_planning` checks the
ranges for data loss, :mod:`.offset_ranges` and :mod:`.task_layout` deal them to read tasks."""
