"""The Iceberg and Delta participants of the two-phase-commit sink: the steps both share.

- Planner (:meth:`TableParticipant.check_at_query_start`): the table is created or checked,
  before any data moves, and its layout (columns, partition spec, data folder) is kept on the
  participant, which Spark pickles into the batch's tasks with the writer; the table and its
  data folder go into the checkpoint (:mod:`unaligned.sink.tables.table_record`), where the
  driver's commit and abort processes find the folder without asking the catalog.
- Step 1 (task): :class:`unaligned.sink.tables.data_file_writer.TableTaskWriter` writes the
  attempt's rows as data files in the table's data folder; the item names them with their
  statistics.
- Step 2b (driver, before the decision): every file named exists with the size its task
  reported (the table formats accept a file that is not there; a reader would fail later).
- Step 2c: ONE table commit of every file of the batch, unless the table holds the batch
  already (:meth:`DeltaTarget.commit_batch`, :meth:`IcebergTarget.commit_batch`), asked again
  while the catalog or store is out of reach, up to ``tableTimeout``
  (:mod:`unaligned.sink.tables.table_outage`); crash point ``driver_after_table_commit`` lies
  right after it. Step 2d: nothing (the commit published).
- Steps 2f / 3b / 4: this query's data files no decision names are deleted
  (:mod:`unaligned.sink.tables.leftover_files`); an aborted batch's files first.

Item: ``{"partition", "attempt", "token", "queryId", "rows", "files": [...]}``, each file with
its ``path`` below the table's data folder. The commit record keeps the items verbatim, so a
restarted driver commits the same files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark.sql.types import StructType

from unaligned._util import crash_points
from unaligned._util.crash_points import CrashPoint
from unaligned.barriers.alignment import arrow_input_schema
from unaligned.checkpoint import Checkpoint
from unaligned.errors import BarrierError, CommitLogError, SinkConfigurationError, TableCommitError
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.table_target import TableFormat, TableTarget
from unaligned.sink.tables.batch_summary import batch_summary
from unaligned.sink.tables.data_file_writer import TableLayout, TableTaskWriter
from unaligned.sink.tables.leftover_files import delete_files, missing_files, remove_leftovers
from unaligned.sink.tables.table_outage import commit_through_outages
from unaligned.sink.tables.table_record import read_record, write_record
from unaligned.sink.tables.table_storage import TableStorage


class TableParticipant:
    """A table target as a 2PC participant. Picklable: options, and the layout once planned."""

    def __init__(
        self, target: TableTarget, schema: StructType, checkpoint: Checkpoint, query_id: str
    ) -> None:
        self._target = target
        self._schema_json = schema.json()
        self._checkpoint = checkpoint
        self._query_id = query_id
        self._layout: TableLayout | None = None
        self._storage_found: TableStorage | None = None
        self.kind = target.format.value

    @classmethod
    def for_query(
        cls, target: TableTarget, schema: StructType, checkpoint: Checkpoint
    ) -> TableParticipant:
        try:
            query_id = checkpoint.query_id()
        except BarrierError as exc:
            raise SinkConfigurationError(
                f"the {target.format.title} sink stamps each commit with the query id: {exc}"
            ) from exc
        return cls(target, schema, checkpoint, query_id)

    @property
    def query_id(self) -> str:
        return self._query_id

    def table(self) -> Any:
        """The driver's side of the table (:class:`DeltaTarget` or :class:`IcebergTarget`)."""
        if self._target.format is TableFormat.DELTA:
            from unaligned.sink.tables.delta_table import DeltaTarget

            return DeltaTarget(self._target, self._query_id)
        from unaligned.sink.tables.iceberg_table import IcebergTarget

        return IcebergTarget(self._target, self._query_id)

    def _storage(self) -> TableStorage:
        if self._layout is not None:
            return self._layout.storage
        if self._storage_found is None:
            self._storage_found = self._find_storage()
        return self._storage_found

    def _find_storage(self) -> TableStorage:
        """The data folder the planner recorded in the checkpoint (no catalog call: a batch is
        checked and decided while the catalog is down), else the table's, asked again while
        the catalog cannot be reached."""
        record = read_record(self._checkpoint)
        if (
            record is not None
            and record.target.format is self._target.format
            and record.target.location == self._target.location
        ):
            return TableStorage(record.data_uri, self._target.properties)
        table = self.table()
        if self._target.format is TableFormat.DELTA:
            storage: TableStorage = table.storage
            return storage
        loaded = commit_through_outages(
            self._target,
            None,
            table.load,
            doing="finding the table's data folder",
            then="Restart the query once it answers again",
        )
        if loaded is None:
            raise TableCommitError(f"{self._target.describe()} does not exist")
        storage = table.storage(loaded)
        return storage

    def describe(self, item: Mapping[str, Any]) -> str:
        return (
            f"{len(item['files'])} data file(s) of task {item['partition']} attempt "
            f"{item['attempt']} ({item['rows']} rows) for {self._target.describe()}"
        )

    def item_key(self, item: Mapping[str, Any]) -> str:
        return f"{item['partition']}-{item['attempt']}-{item['token']}"

    def check_at_query_start(self) -> None:
        """Create or check the table before any data moves; keep its layout for the tasks."""
        schema = arrow_input_schema(StructType.fromJson(_json(self._schema_json)))
        self._layout = self.table().prepare(schema)
        write_record(self._checkpoint, self._target, self._layout.storage.uri)

    def warm_up(self) -> None:
        """Nothing: the data files open with local calls or the store's client."""

    def open_task(self, batch_id: int, partition_id: int, attempt_number: int) -> TableTaskWriter:
        if self._layout is None:
            raise CommitLogError(
                f"the {self._target.format.title} sink's task got no table layout from the "
                "planner (the writer must be built by Spark's planner)"
            )
        return TableTaskWriter(self._layout, batch_id, partition_id, attempt_number, self._query_id)

    def commit(
        self, items: Sequence[Mapping[str, Any]], batch_id: int, progress: Callable[[int], None]
    ) -> None:
        """One table commit of every file of the batch (none when the table holds it)."""

        def verify() -> None:  # before the first commit attempt, not for a batch committed
            if any(item["files"] for item in items):
                missing = missing_files(self._storage(), items)
                if missing:
                    raise TableCommitError(
                        f"batch {batch_id} was decided but data file(s) {', '.join(missing)} of "
                        f"{self._target.describe()} are missing or changed: their rows would be "
                        "lost"
                    )

        summary = batch_summary(self._checkpoint, self._query_id, batch_id)
        if commit_through_outages(
            self._target,
            batch_id,
            lambda: self.table().commit_batch(items, batch_id, summary, verify),
        ):
            crash_points.reach(CrashPoint.DRIVER_AFTER_TABLE_COMMIT, batch_id)
        _all_committed(items, progress)

    def consolidate(
        self, items: Sequence[Mapping[str, Any]], batch_id: int
    ) -> list[Mapping[str, Any]]:
        return list(items)

    def check_decidable(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        if not items:
            return
        missing = missing_files(self._storage(), items)
        if not missing:
            return
        self.abort(items, batch_id)
        raise CommitLogError(
            f"batch {batch_id} was not decided: data file(s) {', '.join(missing)} are missing "
            "or changed since their task wrote them. Nothing of the batch was committed; it "
            "runs again when the query restarts"
        )

    def finish_batch(self, record: CommitRecord) -> None:
        """Nothing: the table commit made the batch visible."""

    def abort(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        delete_files(self._storage(), items)

    def clean_up(self, log: CommitLog, up_to_batch: int | None) -> int:
        try:
            storage = self._storage()
        except TableCommitError:  # no table yet: nothing written
            return 0
        return remove_leftovers(storage, self._query_id, log, up_to_batch)

    def committed(self) -> tuple[int | None, str | None]:
        """This query's last batch in the table and its snapshot id / table version."""
        table = self.table()
        batch = table.committed_batch()
        return batch, (table.snapshot_of(batch) if batch is not None else None)


def _all_committed(items: Sequence[Mapping[str, Any]], progress: Callable[[int], None]) -> None:
    """Every item was committed by the one table commit: progress reported item by item (so a
    crash point armed "after the first of several items" fires after the table commit)."""
    for done in range(1, len(items) + 1):
        progress(done)


def _json(text: str) -> dict[str, Any]:
    import json

    value: dict[str, Any] = json.loads(text)
    return value
