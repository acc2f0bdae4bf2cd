"""A Delta table as the driver sees it (deltalake): created, checked, and one commit per batch.

- Planner (:meth:`DeltaTarget.prepare`): the table is created from the query's columns when
  the location holds none (partition columns from ``partitionBy``); an existing table's schema
  must take the query's columns (:mod:`unaligned.sink.tables.schema_fit`; with ``mergeSchema``
  the missing ones are added as nullable columns first) and its partition columns must be
  those of ``partitionBy`` when given. Returns the :class:`DeltaLayout` tasks write with.
- Commit runner (:meth:`DeltaTarget.commit_batch`): every file of the batch in ONE
  ``create_write_transaction`` (mode append) stamped with the app transaction (app id = the
  query id, version = the batch id: what Spark's own Delta sink does). First it reads
  ``transaction_version(app id)``: a batch at or below it is in the table already (a commit
  that landed but whose answer was lost) and is not committed again; delta-rs does not skip
  by itself. A concurrent commit makes delta-rs rebase a blind append by itself; a conflict it
  cannot rebase (another writer with the same app id) is asked again after reading the
  version anew, up to :data:`COMMIT_ATTEMPTS` times.

The loaded table is kept in the process (the commit runner is a worker Spark reuses across
batches; at most :data:`KEPT_TABLES` tables) and brought up to date before every attempt with
``update_incremental`` (only the log's newer commits are read), as Spark's ``DeltaLog`` keeps
its snapshot and updates it: a fresh load reads the last checkpoint and replays every commit
after it, a cost that grows between checkpoints. The check reads the table's newest version
either way; the commit's own conflict check covers what lands after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from unaligned.errors import MissingExtraError, TableCommitError, TableSchemaError
from unaligned.sink.table_target import TableTarget
from unaligned.sink.tables.batch_summary import BATCH_KEY, QUERY_KEY
from unaligned.sink.tables.delta_layout import DeltaLayout, log_path
from unaligned.sink.tables.schema_fit import columns_to_add
from unaligned.sink.tables.table_storage import TableStorage

logger = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 10
KEPT_TABLES = 8
_kept: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}


def _deltalake() -> Any:
    try:
        import deltalake
    except ImportError as exc:
        raise MissingExtraError(
            "tableFormat=delta needs the deltalake package: pip install 'unaligned[delta]'"
        ) from exc
    return deltalake


class DeltaTarget:
    """The driver's side of one Delta table, for the query ``query_id``."""

    def __init__(self, target: TableTarget, query_id: str) -> None:
        self._target = target
        self._query_id = query_id
        self.storage = TableStorage(target.location, target.properties)

    @property
    def app_id(self) -> str:
        return self._query_id

    def describe(self) -> str:
        return self._target.describe()

    def _options(self) -> dict[str, str] | None:
        return self._target.options or None

    def _table(self) -> Any:
        return _deltalake().DeltaTable(self._target.location, storage_options=self._options())

    def _newest(self) -> Any:
        """The table at its newest version: the kept one brought up to date, else loaded."""
        key = (self._target.location, tuple(sorted(self._target.options.items())))
        table = _kept.pop(key, None)
        if table is not None:
            try:
                table.update_incremental()
            except (_deltalake().exceptions.DeltaError, OSError) as exc:
                logger.info("%s: loading the table again (%s)", self.describe(), exc)
                table = None
        if table is None:
            table = self._table()
        _kept[key] = table  # the newest last: the oldest goes first
        while len(_kept) > KEPT_TABLES:
            _kept.pop(next(iter(_kept)))
        return table

    def prepare(self, query_schema: pa.Schema) -> DeltaLayout:
        deltalake = _deltalake()
        partitions = [f.column for f in self._target.partition_by]
        if not deltalake.DeltaTable.is_deltatable(self._target.location, self._options()):
            missing = [
                c for c in partitions if c.lower() not in {n.lower() for n in query_schema.names}
            ]
            if missing:
                raise TableSchemaError(
                    f"{self.describe()}: partitionBy names column(s) {', '.join(missing)} the "
                    "query does not have"
                )
            logger.info("creating %s from the query's columns", self.describe())
            deltalake.DeltaTable.create(
                self._target.location,
                schema=query_schema,
                mode="ignore",  # a concurrent creator won: its table is checked below
                partition_by=partitions or None,
                storage_options=self._options(),
            )
        table = self._table()
        schema = pa.schema(table.schema().to_arrow())
        existing = list(table.metadata().partition_columns)
        if partitions and [c.lower() for c in partitions] != [c.lower() for c in existing]:
            raise TableSchemaError(
                f"{self.describe()} is partitioned by {existing or 'nothing'}, but option "
                f"partitionBy asks for {partitions}; a Delta table keeps its partition columns"
            )
        added = columns_to_add(
            schema, query_schema, merge_schema=self._target.merge_schema, table=self.describe()
        )
        if added:
            from deltalake.schema import Field

            logger.info("mergeSchema: adding %s to %s", [f.name for f in added], self.describe())
            table.alter.add_columns([Field.from_arrow(f) for f in added])
            schema = pa.schema(self._table().schema().to_arrow())
        return DeltaLayout(
            self.storage, schema, tuple(existing), self._target.compression, self.describe()
        )

    def committed_batch(self) -> int | None:
        """The last batch of this query in the table (its app transaction's version)."""
        version = self._table().transaction_version(self.app_id)
        return None if version is None else int(version)

    def commit_batch(
        self,
        items: Sequence[Mapping[str, Any]],
        batch_id: int,
        summary: Mapping[str, str],
        verify: Callable[[], None] = lambda: None,
    ) -> bool:
        """Commit every file of ``items`` in one table version; ``False`` when the table holds
        the batch already (nothing committed now)."""
        deltalake = _deltalake()
        from deltalake import CommitProperties, Transaction
        from deltalake.transaction import AddAction

        now = int(time.time() * 1000)
        actions = [
            AddAction(
                log_path(str(f["path"])),
                int(f["bytes"]),
                dict(f["partitionValues"]),
                now,
                True,
                str(f["stats"]),
            )
            for item in items
            for f in item["files"]
        ]
        metadata: dict[str, Any] = {
            **summary,
            QUERY_KEY: self._query_id,
            BATCH_KEY: str(batch_id),
        }
        if self._target.user_metadata is not None:
            metadata["userMetadata"] = self._target.user_metadata
        last: Exception | None = None
        for attempt in range(COMMIT_ATTEMPTS):
            table = self._newest()
            done = table.transaction_version(self.app_id)
            if done is not None and int(done) >= batch_id:
                logger.info(
                    "batch %d is in %s already (app transaction version %s): not committed again",
                    batch_id,
                    self.describe(),
                    done,
                )
                return False
            if attempt == 0:
                verify()
            try:
                table.create_write_transaction(
                    actions,
                    "append",
                    table.schema(),
                    list(table.metadata().partition_columns),
                    commit_properties=CommitProperties(
                        custom_metadata=metadata,
                        app_transactions=[Transaction(self.app_id, batch_id)],
                    ),
                )
                return True
            except deltalake.exceptions.CommitFailedError as exc:
                last = exc
                logger.warning(
                    "batch %d: %s refused the commit (attempt %d of %d): %s; reading the "
                    "table again",
                    batch_id,
                    self.describe(),
                    attempt + 1,
                    COMMIT_ATTEMPTS,
                    exc,
                )
                time.sleep(min(0.05 * 2**attempt, 2.0))
        raise TableCommitError(
            f"batch {batch_id}: {self.describe()} refused the commit {COMMIT_ATTEMPTS} times; "
            f"last: {last}. The batch's decision stays in the commit log: a restart commits it"
        )

    def snapshot_of(self, batch_id: int) -> str | None:
        """The table version holding ``batch_id`` of this query, if the log still says."""
        table = self._table()
        for entry in table.history(limit=200):
            if str(entry.get(QUERY_KEY)) == self._query_id and str(entry.get(BATCH_KEY)) == str(
                batch_id
            ):
                return str(entry.get("version"))
        return None
