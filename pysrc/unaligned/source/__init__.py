"""The Kafka source: ``spark.readStream.format("unaligned")``.

- :mod:`.stream_reader` runs on the driver (Spark's Python source runner): offsets, planning.
- :mod:`.partition_reader` runs in executor tasks: reads one offset range into Arrow batches.
- :mod:`.options`, :mod:`.offsets`, :mod:`.offset_ranges`, :mod:`.batch_sizing`,
  :mod:`.arrow_rows`: parsed options, checkpointed offsets, ranges and read limits, batch sizing,
  and the rows the source yields.
"""
