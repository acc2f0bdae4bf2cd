"""Avro test data: records written by fastavro (the reference writer), read back column-wise."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from unaligned.registry.avro.decoder import compile_decoder
from unaligned.registry.avro.schema import parse_avro
from unaligned.registry.avro.vectors import Reading


def payloads(schema: Any, records: Sequence[Any]) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for record in records:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record)
        out.append(buffer.getvalue())
    return out


def read(writer: Any, reader: Any, blobs: Sequence[bytes]) -> tuple[pa.Array, Reading, np.ndarray]:
    """The records ``blobs`` (written with ``writer``) read as ``reader``: (array, the
    reading with its error codes, cursors after each record)."""
    lengths = np.array([len(b) for b in blobs], np.int64)
    ends = np.cumsum(lengths)
    data = np.frombuffer(b"".join(blobs) or b"\0", np.uint8)
    reading = Reading(data, ends)
    decode = compile_decoder(parse_avro(json.dumps(writer)), parse_avro(json.dumps(reader)))
    array, pos = decode(reading, ends - lengths, np.arange(len(blobs)))
    return array, reading, pos
