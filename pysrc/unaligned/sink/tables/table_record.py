"""``unaligned/table-target.json``: which table a table sink writes, kept in the checkpoint.

Written by the planner at every query start (:meth:`TableParticipant.check_at_query_start`),
after the table was created or checked: the format, the table (Iceberg identifier and catalog
name, or Delta location), the folder its data files go to, ``tableTimeout``, and those catalog
or storage properties that are not secrets (a key naming a secret, password, token, credential
or key is left out; a URI loses its user info). Two readers:

- the driver's commit and abort processes (a new Python process per batch, without the
  planner's layout) find the data folder here instead of asking the catalog, so a batch's data
  files are checked and its decision recorded while the catalog is down;
- ``unaligned inspect`` (:mod:`unaligned.inspection.table_state`) names the table and reads it
  with these properties (credentials come from the environment: pyiceberg's
  ``PYICEBERG_CATALOG__<NAME>__<PROPERTY>``, the ``AWS_*`` variables).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from unaligned._util.fs import atomic_write, read_bytes
from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError
from unaligned.sink.table_target import TableFormat, TableTarget

_SECRET = re.compile(r"secret|password|token|credential|key", re.IGNORECASE)


def shareable(properties: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``properties`` without secrets: keys naming one dropped, user info cut from URIs."""
    return tuple(
        (k, re.sub(r"://[^/@]*@", "://", v)) for k, v in properties if not _SECRET.search(k)
    )


@dataclass(frozen=True)
class TableRecord:
    """What ``table-target.json`` holds: the target (without secrets) and its data folder."""

    target: TableTarget
    data_uri: str

    def to_json(self) -> bytes:
        t = self.target
        return json.dumps(
            {
                "format": t.format.value,
                "table": t.location,
                "catalogName": t.catalog_name,
                "properties": dict(shareable(t.properties)),
                "dataLocation": self.data_uri,
                "tableTimeoutMs": t.timeout_ms,
            },
            sort_keys=True,
        ).encode()


def write_record(checkpoint: Checkpoint, target: TableTarget, data_uri: str) -> None:
    atomic_write(checkpoint.table_target, TableRecord(target, data_uri).to_json())


def read_record(checkpoint: Checkpoint) -> TableRecord | None:
    """The record, or ``None`` when the checkpoint has none (not a table sink, or written by
    an earlier version)."""
    location = checkpoint.table_target
    data = read_bytes(location)
    if data is None:
        return None
    try:
        doc = json.loads(data)
        target = TableTarget(
            TableFormat(doc["format"]),
            str(doc["table"]),
            catalog_name=str(doc["catalogName"]),
            properties=tuple(sorted((str(k), str(v)) for k, v in doc["properties"].items())),
            timeout_ms=int(doc["tableTimeoutMs"]),
        )
        return TableRecord(target, str(doc["dataLocation"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CommitLogError(f"{location.uri or location.path} is unreadable: {exc!r}") from exc
