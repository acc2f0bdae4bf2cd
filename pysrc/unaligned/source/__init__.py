"""The Kafka source: ``spark.readStream.format("unaligned")``.

- :mod:`.stream_reader` is the object Spark builds and pickles: on the driver (Spark's Python
  source runner) it hands every call to :mod:`.planning` (offsets, read limits, the batch's
  ranges and read tasks), built on first use; in executor tasks it reads.
- :mod:`.partition_reader` runs in executor tasks: reads a task's offset ranges (one or more
  topic-partitions) into Arrow batches (:mod:`.arrow_rows`: the rows the source yields).
- :mod:`.options`, :mod:`.option_specs`, :mod:`.offset_options`, :mod:`.position_options`,
  :mod:`.offsets`: parsed options and their offsets JSON, checkpointed offsets.
- :mod:`.lost_records`, :mod:`.stopping`, :mod:`.group_offsets`, :mod:`.batch_reader`:
  data-loss checks, stop requests, monitoring offsets, batch reads.
"""
