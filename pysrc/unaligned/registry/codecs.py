"""One decoder per (format, reader schema, writer schema): what the source's read tasks decode a
column's records with.

:func:`decoder_for` builds, once per worker process and pair of schemas, the decoder of
records written with the writer's schema: Avro's column-wise decoder with schema resolution
(:mod:`unaligned.registry.avro.decoder`), JSON Schema's (:mod:`unaligned.registry.json_format`)
or Protobuf's (:mod:`unaligned.registry.protobuf.protobuf_format`, which needs the ``protobuf``
extra). A decoder reads the rows of a batch it is given and marks those that do not decode in the
batch's :class:`~unaligned.registry.avro.vectors.Reading`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import pyarrow as pa

from unaligned._util.process_memo import ProcessMemo
from unaligned.registry.avro import vectors as av
from unaligned.registry.avro.schema import AvroType, parse_avro
from unaligned.registry.connection.schemas import ResolvedSchema
from unaligned.registry.framing import Frames
from unaligned.registry.options import ColumnFormat, Format


class ColumnDecoder(Protocol):
    """Decodes the rows ``rows`` of a batch's column (one writer schema id)."""

    def decode(self, reading: av.Reading, frames: Frames, rows: np.ndarray) -> pa.Array: ...


def parsed_avro(resolved: ResolvedSchema) -> AvroType:
    return parse_avro(resolved.schema.text, [s.text for _, s in resolved.referenced])


class AvroColumnDecoder:
    """Avro records written with one schema, read as the reader's (schema resolution)."""

    def __init__(self, reader: ResolvedSchema, writer: ResolvedSchema) -> None:
        from unaligned.registry.avro.decoder import compile_decoder

        self._read = compile_decoder(parsed_avro(writer), parsed_avro(reader))

    def decode(self, reading: av.Reading, frames: Frames, rows: np.ndarray) -> pa.Array:
        values, pos = self._read(reading, frames.starts[rows].astype(np.int64), rows)
        reading.fail(rows, pos > frames.ends[rows], av.TRUNCATED)
        return values


_DECODERS: ProcessMemo[tuple[ColumnFormat, ResolvedSchema, ResolvedSchema], ColumnDecoder] = (
    ProcessMemo()
)


def decoder_for(
    column: ColumnFormat, reader: ResolvedSchema, writer: ResolvedSchema
) -> ColumnDecoder:
    """The decoder of ``writer``'s records as ``reader``, built once per process. Raises
    :class:`~unaligned.registry.avro.decoder.SchemaResolutionError` (or ``ValueError``) when
    the writer's schema cannot be read as the reader's."""

    fmt = column.format

    def build() -> ColumnDecoder:
        if fmt is Format.AVRO:
            return AvroColumnDecoder(reader, writer)
        if fmt is Format.JSON_SCHEMA:
            from unaligned.registry.json_format import JsonColumnDecoder

            return JsonColumnDecoder(reader)
        from unaligned.registry.protobuf.protobuf_format import ProtobufColumnDecoder

        return ProtobufColumnDecoder(column, reader, writer)

    return _DECODERS.get_or_compute((column, reader, writer), build)
