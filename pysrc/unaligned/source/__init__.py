"""The Kafka source: ``spark.readStream.format("unaligned")``.

- :mod:`.stream_reader` is the object Spark builds and pickles: on the driver (Spark's Python
  source runner) it hands every call to :mod:`.batch_planning`, built on first use (offsets,
  read limits, planning; :mod:`.range_planning`: the ranges after the data-loss checks); in
  executor tasks it reads.
- :mod:`.partition_reader` runs in executor tasks: reads a task's offset ranges (one or more
  topic-partitions) into Arrow batches.
- :mod:`.options`, :mod:`.offset_options`, :mod:`.offsets`, :mod:`.offset_ranges`,
  :mod:`.batch_sizing`, :mod:`.arrow_rows`: parsed options and their offsets JSON, checkpointed
  offsets, ranges, read tasks and read limits, batch sizing, and the rows the source yields.
"""
