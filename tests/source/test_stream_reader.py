"""The stream reader Spark builds, pickles and calls: what a reader that Spark's read planner
only builds and pickles carries, and when its driver side is built (the driver side's own
behaviour: ``test_batch_planning.py``)."""

from __future__ import annotations

from pyspark import cloudpickle
from pyspark.sql.streaming.datasource import ReadMaxRows

from unaligned.source.options import SourceOptions
from unaligned.source.planning.batch_sizing import UNCAPPED_ROWS
from unaligned.source.stream_reader import KafkaStreamReader


def test_a_reader_only_built_and_pickled_carries_its_options_and_no_driver_side() -> None:
    options = SourceOptions.parse({"subscribe": "t", "kafka.bootstrap.servers": "127.0.0.1:1"})
    reader = KafkaStreamReader(options)
    copy = cloudpickle.loads(cloudpickle.dumps(reader))
    assert isinstance(copy, KafkaStreamReader)
    assert copy._options == options
    assert reader._planning is None and copy._planning is None
    reader.stop()  # Spark's planner may stop it: nothing to close, nothing built
    assert reader._planning is None
    assert reader.getDefaultReadLimit() == ReadMaxRows(UNCAPPED_ROWS)  # the first call builds it
    assert reader._planning is not None
    reader.stop()
