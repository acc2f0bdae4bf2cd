"""Merging a small batch's staged files into one before the decision (``mergeFilesBelow``).

Step 2b of the file sink, in the driver, before the commit record is written: when a batch's
staged files total at most the option's size, they are read in partition order and written
into one new staged file of the batch (``staging_dir/part-merged-<random>.parquet.staged``),
which the commit record then names instead of them. The batch is then one file: fewer small
files, and a single rename publishes it whole, also to readers that list the directory.

Nothing here is visible before the decision: a crash during a merge leaves staged files only
(removed by recovery; the batch runs again), and a decider that loses the race for the record
leaves its merged file to the clean-up of the batch's staging directory. Rows keep their order:
partition by partition, each file's rows as its task wrote them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from unaligned._util.fs import Location
from unaligned.errors import CommitLogError
from unaligned.sink.files.file_manifest import final_name, staged_name, staging_dir

logger = logging.getLogger(__name__)


def merge_small_batch(
    output: Location,
    items: Sequence[Mapping[str, Any]],
    batch_id: int,
    query_id: str,
    *,
    below_bytes: int,
    compression: str,
    row_group_rows: int,
) -> list[Mapping[str, Any]]:
    """The items the batch's decision names: one merged item when there are two or more
    whose files total at most ``below_bytes`` and share one schema, else ``items`` as they are.
    """
    total = sum(int(item["bytes"]) for item in items)
    if below_bytes <= 0 or len(items) < 2 or total > below_bytes:
        return list(items)
    fs = output.filesystem
    ordered = sorted(items, key=lambda item: int(item["partition"]))
    sources = [pq.ParquetFile(output.child(item["staged"]).path, filesystem=fs) for item in ordered]
    schema = sources[0].schema_arrow
    if any(not source.schema_arrow.equals(schema) for source in sources[1:]):
        logger.info("batch %d: staged files differ in schema; committed unmerged", batch_id)
        return list(items)
    relative = f"{staging_dir(batch_id, query_id)}/{staged_name('merged')}"
    target = output.child(relative)
    rows = 0
    with (
        fs.open_output_stream(target.path) as stream,
        pq.ParquetWriter(stream, schema, compression=compression) as writer,
    ):
        buffered: list[pa.RecordBatch] = []
        buffered_rows = 0
        for source in sources:
            for batch in source.iter_batches(batch_size=row_group_rows):
                buffered.append(batch)
                buffered_rows += batch.num_rows
                rows += batch.num_rows
                if buffered_rows >= row_group_rows:
                    writer.write_table(pa.Table.from_batches(buffered, schema))
                    buffered, buffered_rows = [], 0
        if buffered:
            writer.write_table(pa.Table.from_batches(buffered, schema))
    expected = sum(int(item["rows"]) for item in items)
    if rows != expected:  # a staged file is not what its task reported: never decide on it
        fs.delete_file(target.path)
        raise CommitLogError(
            f"batch {batch_id} was not decided: its staged files hold {rows} rows, their tasks "
            f"reported {expected}; it runs again when the query restarts"
        )
    size = fs.get_file_info(target.path).size
    first = int(ordered[0]["partition"])
    logger.info(
        "batch %d: %d staged files (%d bytes) merged into one of %d bytes",
        batch_id,
        len(items),
        total,
        size,
    )
    return [
        {
            "staged": relative,
            "final": final_name(batch_id, first, query_id),
            "rows": rows,
            "bytes": size,
            "partition": first,
            "queryId": query_id,
            "merged": [str(item["staged"]) for item in ordered],
        }
    ]
