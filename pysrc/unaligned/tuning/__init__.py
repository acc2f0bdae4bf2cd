"""Tuning Spark's Python processes: the worker memory settings every task worker applies
(``worker_memory``), and the start-up opt-ins of ``unaligned tune-spark`` (``spark_tuning``):
bytecode in Spark's ``pyspark.zip`` (``pyspark_bytecode``) and the preloading daemon
(``preloading_daemon``, Spark's ``spark.python.daemon.module``)."""
