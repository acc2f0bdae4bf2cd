"""Several record types in one column (RecordNameStrategy / TopicRecordNameStrategy topics, the
usual event-sourcing layout): which type each record is, and the struct of one field per type.

A column read with several subjects (``valueSubject`` a comma-separated list, or several
``valueRecordName`` with the ``record`` or ``topic-record`` strategy) has one branch per type
(:attr:`~unaligned.registry.connection.schemas.ColumnReading.branches`). :func:`branch_rows` sends
the rows of one writer schema id to their branch: the branch whose subject had that id when the
query started, else the one whose subject the registry says holds it (asked once per id and
process; a schema named by a GUID the registry gave no id for: the branch with that schema).
One id can sit under several subjects (Confluent's Protobuf serializer registers the whole
``.proto`` file under each message's subject): Protobuf records then go by the message their
message indexes name, the branch reading that message. :func:`branches_struct` puts the
branches' decoded rows together, a record's own type set and the others null.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from unaligned.registry.avro import vectors as av
from unaligned.registry.connection.schemas import ColumnReading, subjects_of, writer_schema
from unaligned.registry.framing import Frames, message_indexes
from unaligned.registry.options import Format, RegistryConfig

Branch = tuple[str, ColumnReading]


def branch_rows(
    branches: tuple[Branch, ...],
    schema_id: int,
    rows: np.ndarray,
    frames: Frames,
    registry: RegistryConfig,
) -> list[tuple[str, ColumnReading, np.ndarray]]:
    """(branch name, branch, its rows) for the rows of ``schema_id``. Raises ``LookupError``
    naming the subjects when no branch reads the id, and the registry's errors."""
    if len(branches) == 1:
        name, branch = branches[0]
        return [(name, branch, rows)]
    found = [(n, b) for n, b in branches if schema_id in b.ids()]
    if not found and schema_id < 0:  # a GUID's schema the registry gave no id for: by its text
        text = writer_schema(registry, schema_id).schema.text
        found = [(n, b) for n, b in branches if text in {s.schema.text for s in b.schemas()}]
    if not found:
        holders = () if schema_id < 0 else subjects_of(registry, schema_id)
        found = [(n, b) for n, b in branches if b.reader.schema.subject in holders]
        if not found:
            read = ", ".join(repr(b.reader.schema.subject) for _, b in branches)
            which = (
                "the schema its GUID names is no version the query started with"
                if schema_id < 0
                else f"schema id {schema_id} is registered under {list(holders)}"
            )
            raise LookupError(f"{which}, none of the record types read ({read})")
    if len(found) == 1 or found[0][1].format.format is not Format.PROTOBUF:
        name, branch = found[0]
        return [(name, branch, rows)]
    return _by_message(found, schema_id, rows, frames, registry)


def _by_message(
    found: list[Branch],
    schema_id: int,
    rows: np.ndarray,
    frames: Frames,
    registry: RegistryConfig,
) -> list[tuple[str, ColumnReading, np.ndarray]]:
    """Protobuf rows of one id split by the message their indexes name; rows of a message no
    branch reads go to the first (whose decoder fails them, naming the message)."""
    from unaligned.registry.protobuf.protobuf_format import reader_message
    from unaligned.registry.protobuf.protobuf_schema import compiled

    first = found[0][1]
    writer = first.reader if schema_id == first.reader.schema_id else None
    loaded = compiled(writer or writer_schema(registry, schema_id))
    paths, _, _ = message_indexes(frames, rows)
    readers = {reader_message(b.reader, b.format).full_name: (n, b) for n, b in found}
    split: dict[str, list[int]] = {}
    for row, path in zip(rows.tolist(), paths, strict=True):
        try:
            message = loaded.message(path).full_name
        except IndexError:
            message = ""
        split.setdefault(readers.get(message, found[0])[0], []).append(row)
    named = dict(found)
    return [(n, named[n], np.array(r, np.int64)) for n, r in split.items()]


def branches_struct(
    n: int, parts: dict[str, list[tuple[np.ndarray, pa.Array]]], target: pa.DataType
) -> pa.Array:
    """The column of ``n`` rows: a struct of one field per branch (``target``'s), each row's
    own branch set (the parts' rows) and the row null when no branch decoded it."""
    children = [av.scatter(n, parts[f.name], f.type) for f in target]
    valid = np.zeros(n, bool)
    for piece in parts.values():
        for rows, _ in piece:
            valid[rows] = True
    return pa.StructArray.from_arrays(children, fields=list(target), mask=av.bool_array(~valid))
