"""An Iceberg table as the driver sees it (pyiceberg): created, checked, one snapshot per batch.

- Catalog: ``load_catalog(catalogName, **catalog.*)``: the embedded SQLite ``SqlCatalog`` by
  default (:mod:`unaligned.sink.table_target`), REST, Glue, Hive... by ``catalog.type``.
- Planner (:meth:`IcebergTarget.prepare`): the table (and its namespace) is created from the
  query's columns when missing, with the partition spec of ``partitionBy``; an existing table
  must take the query's columns (:mod:`unaligned.sink.tables.schema_fit`; ``mergeSchema`` adds
  the missing ones as optional columns); ``partitionBy``, when given, must be the table's spec
  (an empty table created without it gets it). Returns the :class:`IcebergLayout` tasks use.
- Commit runner (:meth:`IcebergTarget.commit_batch`): one transaction (pyiceberg's, staging
  the metadata once: :func:`unaligned.sink.tables.iceberg_history.one_copy_transaction`) with a
  merge append of every ``DataFile`` of the batch (rebuilt from the tasks' statistics: no
  footer read; manifests merged, ``commit.manifest-merge.enabled`` true unless the table says
  otherwise, as Java's ``newAppend()`` in Flink's and Spark's commits), the
  snapshot summary stamped with ``spark.sql.streaming.queryId`` / ``spark.sql.streaming.epochId``
  (the names Spark's own Iceberg streaming sink writes), the batch's Kafka offsets and
  ``snapshot-property.*``, and the table property ``unaligned.committed-batch.<query id>`` set
  in the same commit (it survives snapshot expiry, which removes summaries). With option
  ``keepSnapshots`` N, a commit that leaves 2N snapshots is followed by the expiry of all but
  the newest N (:meth:`IcebergTarget._expire_snapshots`).

Idempotence. Before every attempt the table is loaded again and this query's last batch read:
the property, else the newest snapshot of this query in the current lineage (as Flink's
``flink.max-committed-checkpoint-id``; the walk stops there). Flink reads it once, at restore,
and then trusts its own state; here each commit runs in a new writer, so the property keeps
the per-batch read cheap. pyiceberg would re-base a conflicting commit by itself
(``commit.retry.num-retries``) without that check; the commit therefore runs on a view of the
table whose retries are 0 (the table's own property is untouched), so a conflict comes back
here as ``CommitFailedException``: reload, check, commit again, up to :data:`COMMIT_ATTEMPTS`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from unaligned.errors import (
    MissingExtraError,
    TableCommitError,
    TableSchemaError,
    TableUnavailableError,
)
from unaligned.sink.table_target import PartitionField, TableTarget
from unaligned.sink.tables.iceberg_history import (
    BATCH_ID_KEY,
    QUERY_ID_KEY,
    newest_batch,
    one_copy_transaction,
    snapshot_of,
)
from unaligned.sink.tables.iceberg_layout import IcebergLayout, decode_data_file
from unaligned.sink.tables.schema_fit import columns_to_add
from unaligned.sink.tables.table_storage import TableStorage

logger = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 20
MARKER_PREFIX = "unaligned.committed-batch."
DATA_PATH_PROPERTY = "write.data.path"
MANIFEST_MERGE_PROPERTY = "commit.manifest-merge.enabled"


def _pyiceberg() -> Any:
    try:
        import pyiceberg.catalog
    except ImportError as exc:
        raise MissingExtraError(
            "tableFormat=iceberg needs the pyiceberg package: pip install 'unaligned[iceberg]'"
        ) from exc
    return pyiceberg.catalog


class IcebergTarget:
    """The driver's side of one Iceberg table, for the query ``query_id``."""

    def __init__(self, target: TableTarget, query_id: str) -> None:
        self._target = target
        self._query_id = query_id

    @property
    def marker(self) -> str:
        return f"{MARKER_PREFIX}{self._query_id}"

    def describe(self) -> str:
        return self._target.describe()

    def catalog(self) -> Any:
        catalog_module = _pyiceberg()
        options = self._target.options
        uri = options.get("uri", "")
        if uri.startswith("sqlite:///"):  # the embedded catalog: its folder must exist
            import os

            os.makedirs(os.path.dirname(uri[len("sqlite:///") - 1 :]) or ".", exist_ok=True)
        try:
            return catalog_module.load_catalog(self._target.catalog_name, **options)
        except (OSError, ConnectionError) as exc:
            raise TableUnavailableError(
                f"cannot reach the catalog of {self.describe()}: {exc}"
            ) from exc

    def load(self, catalog: Any | None = None) -> Any:
        from pyiceberg.exceptions import NoSuchTableError

        catalog = catalog or self.catalog()
        try:
            return catalog.load_table(self._target.location)
        except NoSuchTableError:
            return None

    def storage(self, table: Any) -> TableStorage:
        location = (
            table.properties.get(DATA_PATH_PROPERTY) or f"{table.location().rstrip('/')}/data"
        )
        return TableStorage(location, self._target.properties)

    def prepare(self, query_schema: pa.Schema) -> IcebergLayout:
        catalog = self.catalog()
        table = self.load(catalog)
        if table is None:
            namespace = self._target.location.rsplit(".", 1)[0]
            catalog.create_namespace_if_not_exists(namespace)
            logger.info("creating %s from the query's columns", self.describe())
            table = catalog.create_table_if_not_exists(self._target.location, schema=query_schema)
        table = self._check_spec(table)
        added = columns_to_add(
            _arrow(table),
            query_schema,
            merge_schema=self._target.merge_schema,
            table=self.describe(),
        )
        if added:
            logger.info("mergeSchema: adding %s to %s", [f.name for f in added], self.describe())
            with table.update_schema() as update:
                update.union_by_name(pa.schema(added))
            table = self.load(catalog)
        return IcebergLayout(
            self.storage(table),
            table.schema().model_dump_json(),
            table.spec().model_dump_json(),
            tuple(sorted(table.properties.items())),
            tuple(sorted({**self._target.options, **table.io.properties}.items())),
            self._target.compression,
            self.describe(),
        )

    def _check_spec(self, table: Any) -> Any:
        wanted = self._target.partition_by
        if not wanted:
            return table
        have = [(f.name, str(f.transform)) for f in table.spec().fields]
        if have == [(_field_name(f), _transform(f)[1]) for f in wanted]:
            return table
        if have or table.current_snapshot() is not None:
            raise TableSchemaError(
                f"{self.describe()} is partitioned by {have or 'nothing'}, but option "
                f"partitionBy asks for {[f.spelled() for f in wanted]}; change the table's "
                "spec with your Iceberg tools, or drop the option"
            )
        with table.update_spec() as update:
            for f in wanted:
                update.add_field(f.column, _transform(f)[0], _field_name(f))
        return table.refresh()

    def committed_batch(self, table: Any | None = None) -> int | None:
        """This query's last batch in the table: the marker property, else its newest
        snapshot in the current lineage."""
        table = table if table is not None else self.load()
        if table is None:
            return None
        marker = table.properties.get(self.marker)
        if marker is not None:
            return int(marker)
        return newest_batch(table, self._query_id)

    def snapshot_of(self, batch_id: int) -> str | None:
        table = self.load()
        return snapshot_of(table, self._query_id, batch_id) if table is not None else None

    def commit_batch(
        self,
        items: Sequence[Mapping[str, Any]],
        batch_id: int,
        summary: Mapping[str, str],
        verify: Callable[[], None] = lambda: None,
    ) -> bool:
        """Commit every file of ``items`` in one snapshot; ``False`` when the table holds the
        batch already (nothing committed now). ``verify`` runs once, before the first
        attempt to commit (not for a batch the table holds)."""
        from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
        from pyiceberg.table import Table, TableProperties

        properties = {
            **dict(self._target.snapshot_properties),
            **summary,
            QUERY_ID_KEY: self._query_id,
            BATCH_ID_KEY: str(batch_id),
        }
        catalog = self.catalog()
        last: Exception | None = None
        for attempt in range(COMMIT_ATTEMPTS):
            table = self.load(catalog)
            if table is None:
                raise TableCommitError(f"batch {batch_id}: {self.describe()} no longer exists")
            done = self.committed_batch(table)
            if done is not None and done >= batch_id:
                logger.info(
                    "batch %d is in %s already (this query's last batch there: %d): not "
                    "committed again",
                    batch_id,
                    self.describe(),
                    done,
                )
                return False
            if attempt == 0:
                verify()
            data_uri = self.storage(table).uri
            files = [decode_data_file(f, data_uri, table) for item in items for f in item["files"]]
            no_retries = {
                MANIFEST_MERGE_PROPERTY: "true",  # Java's default (pyiceberg's is false)
                **table.metadata.properties,
                TableProperties.COMMIT_NUM_RETRIES: "0",
            }
            view = Table(
                table.name(),
                table.metadata.model_copy(update={"properties": no_retries}),
                table.metadata_location,
                table.io,
                table.catalog,
            )
            transaction = one_copy_transaction(view)
            update = transaction.update_snapshot(snapshot_properties=properties)
            with update.merge_append() as add:
                for data_file in files:
                    add.append_data_file(data_file)
            # staged last: the snapshot's steps read the loaded metadata, with nothing to copy
            transaction.set_properties({self.marker: str(batch_id)})
            try:
                transaction.commit_transaction()
            except (CommitFailedException, CommitStateUnknownException) as exc:
                last = exc
                logger.warning(
                    "batch %d: %s: commit attempt %d of %d met a concurrent commit or an "
                    "unknown outcome (%s); loading the table again",
                    batch_id,
                    self.describe(),
                    attempt + 1,
                    COMMIT_ATTEMPTS,
                    exc,
                )
                time.sleep(min(0.05 * 2**attempt, 2.0))
                continue
            self._expire_snapshots(view, batch_id)  # the commit carries the table's new state
            return True
        raise TableCommitError(
            f"batch {batch_id}: {self.describe()} refused the commit {COMMIT_ATTEMPTS} times; "
            f"last: {last}. The batch's decision stays in the commit log: a restart commits it"
        )

    def _expire_snapshots(self, table: Any, batch_id: int) -> None:
        """With ``keepSnapshots`` N, once the table (just committed) holds 2N snapshots: every
        snapshot but the newest N and the branch and tag heads is expired. Their files stay
        (pyiceberg's expiry removes metadata only); the sink's own check reads the marker
        property, which expiry keeps. A failure is logged and left to a later batch: this
        one is committed."""
        from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
        from pyiceberg.table.update.snapshot import ExpireSnapshots

        keep = self._target.keep_snapshots
        snapshots = list(table.metadata.snapshots)
        if keep is None or len(snapshots) < 2 * keep:
            return
        snapshots.sort(key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
        kept = {s.snapshot_id for s in snapshots[-keep:]}
        kept |= {ref.snapshot_id for ref in table.metadata.refs.values()}
        doomed = [s.snapshot_id for s in snapshots if s.snapshot_id not in kept]
        if not doomed:
            return
        try:
            ExpireSnapshots(one_copy_transaction(table, autocommit=True)).by_ids(doomed).commit()
            logger.info(
                "batch %d: expired %d snapshot(s) of %s", batch_id, len(doomed), self.describe()
            )
        except (CommitFailedException, CommitStateUnknownException) as exc:
            logger.warning(
                "batch %d: expiring old snapshots of %s met a concurrent commit (%s); tried "
                "again after a later batch",
                batch_id,
                self.describe(),
                exc,
            )


def _arrow(table: Any) -> pa.Schema:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return schema_to_pyarrow(table.schema(), include_field_ids=False)


def _field_name(field: PartitionField) -> str:
    if field.transform == "identity":
        return field.column
    if field.width is not None:
        return f"{field.column}_{field.transform}_{field.width}"
    return f"{field.column}_{field.transform}"


def _transform(field: PartitionField) -> tuple[Any, str]:
    from pyiceberg import transforms

    width = field.width or 1
    made: Any
    if field.transform == "bucket":
        made = transforms.BucketTransform(width)
    elif field.transform == "truncate":
        made = transforms.TruncateTransform(width)
    else:
        made = {
            "identity": transforms.IdentityTransform,
            "year": transforms.YearTransform,
            "month": transforms.MonthTransform,
            "day": transforms.DayTransform,
            "hour": transforms.HourTransform,
            "void": transforms.VoidTransform,
        }[field.transform]()
    return made, str(made)
