"""An Iceberg or Delta table written by the sink, read back by the formats' own libraries.

:class:`TableUnderTest` holds the sink options of one table (a Delta location, or an Iceberg
identifier in an embedded SQLite catalog under a warehouse folder) and reads it the way users
do: ``deltalake``'s ``DeltaTable.to_pyarrow_table`` and pyiceberg's ``Table.scan().to_arrow``
(neither written by this project). It also lists the Parquet files in the table's data folder
and the files the table's current snapshot names, so a test can prove nothing is left over.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class TableUnderTest:
    format: str
    root: Path
    """Delta: the table's folder; Iceberg: the warehouse."""
    identifier: str = "db.events"

    @classmethod
    def make(cls, fmt: str, tmp_path: Path, name: str = "table") -> TableUnderTest:
        return cls(fmt, tmp_path / name)

    def sink_options(self, **extra: str) -> dict[str, str]:
        if self.format == "delta":
            return {"tableFormat": "delta", "path": str(self.root), **extra}
        return {
            "tableFormat": "iceberg",
            "path": self.identifier,
            "catalog.warehouse": str(self.root),
            **extra,
        }

    # --- Iceberg --------------------------------------------------------------------------------
    def iceberg(self) -> Any:
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog(
            "default",
            type="sql",
            uri=f"sqlite:///{self.root}/unaligned-catalog.db",
            warehouse=f"file://{self.root}",
        )
        return catalog.load_table(self.identifier)

    def delta(self) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(str(self.root))

    def exists(self) -> bool:
        if self.format == "delta":
            from deltalake import DeltaTable

            return bool(DeltaTable.is_deltatable(str(self.root)))
        return (self.root / "unaligned-catalog.db").exists() and self._iceberg_exists()

    def _iceberg_exists(self) -> bool:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            self.iceberg()
        except NoSuchTableError:
            return False
        return True

    def read(self) -> pa.Table:
        if self.format == "delta":
            return self.delta().to_pyarrow_table()
        return self.iceberg().scan().to_arrow()

    def values_by_partition(self) -> dict[int, list[bytes]]:
        """The ``value`` column by the input's ``partition`` column, ordered by ``offset``."""
        rows = self.read().select(["partition", "offset", "value"]).to_pylist()
        got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        for row in rows:
            got[row["partition"]].append((row["offset"], row["value"]))
        return {p: [v for _, v in sorted(values)] for p, values in got.items()}

    def data_folder(self) -> Path:
        return self.root if self.format == "delta" else self.root / "db" / "events" / "data"

    def files_on_disk(self) -> set[str]:
        folder = self.data_folder()
        if not folder.exists():
            return set()
        return {
            str(p)
            for p in folder.rglob("*.parquet")
            if not any(part.startswith(("_", ".")) for part in p.relative_to(folder).parts[:-1])
        }

    def files_in_table(self) -> set[str]:
        if self.format == "delta":
            return {uri.removeprefix("file://") for uri in self.delta().file_uris()}
        files = self.iceberg().inspect.files().column("file_path").to_pylist()
        return {str(f).removeprefix("file://") for f in files}

    def batches_of(self, query_id: str) -> list[int]:
        """The batch ids of ``query_id`` the table's commits are stamped with, oldest first."""
        if self.format == "delta":
            history = self.delta().history()
            return sorted(
                int(h["unaligned.batchId"])
                for h in history
                if h.get("unaligned.queryId") == query_id
            )
        table = self.iceberg()
        return sorted(
            int(s.summary["spark.sql.streaming.epochId"])
            for s in table.snapshots()
            if s.summary is not None and s.summary["spark.sql.streaming.queryId"] == query_id
        )

    def kafka_offsets(self, query_id: str) -> list[dict[str, Any]]:
        """The Kafka offsets each of the query's commits carries, oldest first."""
        if self.format == "delta":
            entries = [h for h in self.delta().history() if h.get("unaligned.queryId") == query_id]
            entries.sort(key=lambda h: int(h["unaligned.batchId"]))
            return [json.loads(h["unaligned.kafkaOffsets"]) for h in entries]
        table = self.iceberg()
        snapshots = [
            s
            for s in table.snapshots()
            if s.summary is not None and s.summary["spark.sql.streaming.queryId"] == query_id
        ]
        snapshots.sort(key=lambda s: int(s.summary["spark.sql.streaming.epochId"]))
        return [json.loads(s.summary["unaligned.kafkaOffsets"]) for s in snapshots]
