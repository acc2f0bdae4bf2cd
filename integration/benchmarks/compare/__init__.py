"""Issue 11's side-by-side benchmarks: our connector against Spark's own Kafka connector.

``python -m benchmarks compare`` (``./dev bench compare``) runs the five workloads, prints one
table and writes ``integration/benchmarks/results/results.json`` with a PNG per workload
beside it (:mod:`benchmarks.bench_compare`). One module per part:

- :mod:`.inputs`: the input topics (uniform or skewed, unique values, produced with kcat) and
  the machine the figures come from;
- :mod:`.connectors`: how each contender reads and writes (the peer with its defaults, the peer
  tuned, ours);
- :mod:`.throughput`: workload 1, records/s to no-op, Kafka and Parquet outputs;
- :mod:`.backpressure`: workload 2, a hot partition and a throttled output, and a slow UDF;
- :mod:`.query_process`: one query in a process of its own, for the kills of workloads 3 and 4;
- :mod:`.driver_kills`: workload 3, committed records over time while the driver is killed;
- :mod:`.recovery`: workload 4, restart to the first committed batch;
- :mod:`.latency`: workload 5, end-to-end latency at a steady rate, and tiny batches;
- :mod:`.progress`: figures from Spark's progress reports (batch durations, percentiles);
- :mod:`.table`: the printed table;
- :mod:`.figures`: the PNGs (matplotlib, the ``bench`` extra).
"""
