"""Schema ids carried in a record header instead of the payload prefix (Confluent's clients
since 8.0: ``HeaderSchemaIdSerializer`` in Java, ``header_schema_id_serializer`` in Python).

Such a record's ``key``/``value`` is the bare encoded record; header ``__key_schema_id`` /
``__value_schema_id`` holds the schema: a magic byte ``1`` and the schema's 16-byte GUID (what
Confluent's serializers write), or a magic byte ``0`` and the 4-byte id, then, for Protobuf,
the message indexes. The source reads the header first and the payload prefix when there is
none, as Confluent's ``DualSchemaIdDeserializer`` does (the default deserializer of its
clients); with several such headers the last one counts (Java's ``Headers.lastHeader``).
:func:`with_header_ids` rewrites the rows that carry the header into the prefixed form
(:func:`~unaligned.registry.framing.frame_payloads`), so everything after
(:func:`~unaligned.registry.framing.split_frames`, the decoders) reads one form. A GUID is
looked up once per worker process (``GET /schemas/guids/{guid}``); the writer schema is then
known under the id the answer gives, or under a key of this process (a negative number, shown
as a null schema id) when it gives none.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import numpy as np
import pyarrow as pa

from unaligned._util.arrow import valid_rows
from unaligned._util.process_memo import ProcessMemo
from unaligned.errors import SchemaNotFoundError
from unaligned.registry.avro import vectors as av
from unaligned.registry.connection.schemas import ResolvedSchema, client_for, remember
from unaligned.registry.framing import binary_parts, frame_payloads
from unaligned.registry.options import RegistryConfig

#: The header each column's schema id travels in (Confluent's names).
HEADER_NAMES = {"key": "__key_schema_id", "value": "__value_schema_id"}
ID_MAGIC, GUID_MAGIC = 0, 1
_GUID_BYTES = 16

#: GUID -> the id its schema is known under in this process.
_GUIDS: ProcessMemo[tuple[RegistryConfig, str], int] = ProcessMemo()
_LOCAL_KEYS: list[int] = [-2]


def header_values(headers: pa.Array, name: str) -> tuple[np.ndarray, pa.Array]:
    """(rows whose headers hold ``name``, that header's value on each of them: the last one)
    of a ``headers`` column (list of struct ``key``, ``value``). numpy only: no pyarrow
    compute with a Python scalar, which imports pandas in the read task."""
    nothing = av.binary_array(np.zeros(0, np.uint8), np.zeros(1, np.int32), pa.binary())
    none = (np.zeros(0, np.int64), nothing)
    if headers.null_count == len(headers):
        return none
    flat = headers.flatten()
    if len(flat) == 0:
        return none
    data, starts, ends = binary_parts(flat.field("key"))
    wanted = np.frombuffer(name.encode(), np.uint8)
    hits = np.flatnonzero(valid_rows(flat.field("key")) & (ends - starts == len(wanted)))
    for j, byte in enumerate(wanted.tolist()):
        hits = hits[data[starts[hits] + j] == byte]
    if hits.size == 0:
        return none
    offsets = headers.offsets.to_numpy().astype(np.int64)
    owners = np.searchsorted(offsets - offsets[0], hits, side="right") - 1
    last = np.flatnonzero(np.append(owners[1:] != owners[:-1], True))
    return owners[last].astype(np.int64), flat.field("value").take(av.indices_array(hits[last]))


def with_header_ids(
    values: pa.Array, headers: pa.Array, name: str, registry: RegistryConfig
) -> tuple[pa.Array, list[tuple[int, str]]]:
    """``values`` with the rows that carry a schema id header rewritten into the prefixed
    form, and (row, reason) of the rows whose header does not read (those rows become null
    here: the caller reports them)."""
    rows, carried = header_values(headers, name)
    if rows.size == 0:
        return values, []
    data, starts, ends = binary_parts(carried)
    present = valid_rows(carried)
    lengths = np.where(present, ends - starts, 0)
    # every header's first 17 bytes (zeros past its end), one row per header
    window = np.zeros((len(rows), 1 + _GUID_BYTES), np.uint8)
    for j in range(1 + _GUID_BYTES):
        lane = np.flatnonzero(lengths > j)
        window[lane, j] = data[starts[lane] + j]
    by_id = present & (lengths >= 5) & (window[:, 0] == ID_MAGIC)
    by_guid = present & (lengths >= 1 + _GUID_BYTES) & (window[:, 0] == GUID_MAGIC)
    ids = np.zeros(len(rows), np.int64)
    ids[by_id] = window[by_id, 1:5].copy().view(">u4").reshape(-1).astype(np.int64)
    guid_rows = np.flatnonzero(by_guid)
    errors: list[tuple[int, str]] = []
    if guid_rows.size:
        guids, inverse = np.unique(window[guid_rows, 1:], axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        for g, raw in enumerate(guids):
            guid = str(uuid.UUID(bytes=raw.tobytes()))
            these = guid_rows[inverse == g]
            try:
                ids[these] = guid_id(registry, guid)
            except SchemaNotFoundError:
                by_guid[these] = False
                errors += [(int(rows[k]), f"schema GUID {guid} is not in the Schema Registry")
                           for k in these.tolist()]  # fmt: skip
    unknown = np.zeros(len(rows), bool)
    unknown[guid_rows] = ~by_guid[guid_rows]
    ok = by_id | by_guid
    tails = starts + np.where(by_guid, 1 + _GUID_BYTES, 5)  # where the message indexes begin
    errors += [
        (int(rows[k]), _bad_header(name, bool(present[k]), int(lengths[k]), int(window[k, 0])))
        for k in np.flatnonzero(~ok & ~unknown).tolist()
    ]
    tail_lengths = np.where(ok, ends - tails, 0)
    prefix_offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(tail_lengths, out=prefix_offsets[1:])
    prefix_data = data[av.spans_index(tails, tail_lengths)]
    prefixes = av.binary_array(prefix_data, prefix_offsets.astype(np.int32), pa.binary())
    payloads = values.take(av.indices_array(rows, ok))
    reframed = frame_payloads(ids, payloads, prefixes)
    untouched = np.ones(len(values), bool)
    untouched[rows] = False
    kept = np.flatnonzero(untouched)
    parts = [(kept, values.take(av.indices_array(kept)).cast(pa.binary())), (rows, reframed)]
    return av.scatter(len(values), parts, pa.binary()), errors


def _bad_header(name: str, present: bool, length: int, magic: int) -> str:
    if not present:
        return f"header {name} has no value"
    return (
        f"header {name} is neither a magic byte 0 and a 4-byte schema id nor a magic byte 1 "
        f"and a 16-byte schema GUID ({length} bytes, the first {magic})"
    )


def guid_id(registry: RegistryConfig, guid: str) -> int:
    """The id the schema of ``guid`` is known under in this process (its registered id when
    the registry says it, else a local negative key), asked of the registry once."""

    def fetch() -> int:
        client = client_for(registry)
        schema, schema_id = client.schema_by_guid(guid)
        if schema_id is None:
            schema_id = _LOCAL_KEYS[0]
            _LOCAL_KEYS[0] -= 1
        resolved = ResolvedSchema(replace(schema, schema_id=schema_id), client.referenced(schema))
        remember(registry, resolved)
        return schema_id

    return _GUIDS.get_or_compute((registry, guid), fetch)
