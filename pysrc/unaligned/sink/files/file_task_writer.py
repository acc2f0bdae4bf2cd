"""One task attempt's staged Parquet file: step 1 of the file sink (an executor task).

:class:`FileTaskWriter` writes the attempt's rows, in row groups of at most
:data:`ROW_GROUP_ROWS`, to a staged file of its own (named by
:func:`unaligned.sink.files.file_manifest.staged_name`, ending in ``.parquet.staged``, under the
batch's staging directory), closes it with a complete footer at ``prepare`` and describes it
for the driver: staged path, final name, rows, bytes. The driver's steps are
:mod:`unaligned.sink.files.file_participant`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from unaligned._util.fs import Location
from unaligned.sink.files.file_manifest import final_name, staged_name, staging_dir

ROW_GROUP_ROWS = 128 * 1024
"""Rows a task buffers before writing a Parquet row group (chunks are smaller)."""


class FileTaskWriter:
    """Writes one task attempt's rows to one staging Parquet file (Step 1 of the protocol)."""

    def __init__(
        self,
        output: Location,
        compression: str,
        batch_id: int,
        partition_id: int,
        attempt_number: int,
        query_id: str,
    ) -> None:
        self._output = output
        self._compression = compression
        self._batch_id = batch_id
        self._partition_id = partition_id
        self._query_id = query_id
        name = staged_name(f"{partition_id:05d}-{attempt_number}")
        self._relative = f"{staging_dir(batch_id, query_id)}/{name}"
        self._staged = output.child(self._relative)
        self._stream: Any | None = None
        self._writer: pq.ParquetWriter | None = None
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_rows = 0
        self._rows = 0

    def begin(self) -> None:
        fs = self._output.filesystem
        fs.create_dir(self._staged.path.rpartition("/")[0], recursive=True)
        self._stream = fs.open_output_stream(self._staged.path)

    def write_chunk(self, chunk: pa.RecordBatch) -> None:
        if self._writer is None:
            assert self._stream is not None, "begin() first"
            self._writer = pq.ParquetWriter(
                self._stream, chunk.schema, compression=self._compression
            )
        self._buffer.append(chunk)
        self._buffered_rows += chunk.num_rows
        self._rows += chunk.num_rows
        if self._buffered_rows >= ROW_GROUP_ROWS:
            self._write_buffer()

    def _write_buffer(self) -> None:
        if self._buffer and self._writer is not None:
            self._writer.write_table(pa.Table.from_batches(self._buffer))
        self._buffer = []
        self._buffered_rows = 0

    def between_chunks(self) -> None:
        """Nothing to bound: the buffer is capped at ``ROW_GROUP_ROWS`` rows by write_chunk."""

    def prepare(self) -> dict[str, Any]:
        """Close the staging file (complete Parquet footer) and describe it for the driver."""
        self._write_buffer()
        if self._writer is not None:
            self._writer.close()
        if self._stream is not None:
            self._stream.close()
        fs = self._output.filesystem
        size = fs.get_file_info(self._staged.path).size
        item: dict[str, Any] = {
            "staged": self._relative,
            "final": final_name(self._batch_id, self._partition_id, self._query_id),
            "rows": self._rows,
            "bytes": size,
            "partition": self._partition_id,
            "queryId": self._query_id,
        }
        return item

    def abort(self) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
            if self._stream is not None and not self._stream.closed:
                self._stream.close()
        finally:
            try:
                self._output.filesystem.delete_file(self._staged.path)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        """Nothing held after prepare/abort."""
