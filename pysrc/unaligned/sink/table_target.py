"""The Iceberg and Delta targets of ``df.writeStream.format("unaligned")``: options parsed.

``tableFormat`` (``iceberg`` or ``delta``) chooses a table target; ``path`` then names the table
as Spark's own writers take it: a Delta table's location (``format("delta").option("path",
...)``), an Iceberg table's identifier ``namespace.table`` (``format("iceberg").option("path",
"db.table")``). The rest follows the writers users know where one exists: ``partitionBy``
(Delta's, and Iceberg's transforms ``day(ts)``, ``bucket(16, id)``...), ``mergeSchema``
(Delta's; Iceberg's Spark writer spells it ``merge-schema``, accepted too),
``snapshot-property.<key>`` (Iceberg's), ``userMetadata`` (Delta's), ``compression``. Iceberg's
catalog takes ``catalog.<property>`` (Spark's ``spark.sql.catalog.<name>.<property>``: ``type``,
``uri``, ``warehouse``, ``s3.endpoint``...); without ``catalog.type`` and ``catalog.uri`` it is
an embedded SQLite catalog under ``catalog.warehouse``. Delta's storage takes
``storage.<option>`` (deltalake's ``storage_options``: ``AWS_ENDPOINT_URL``...). What the
participant does with them: :mod:`unaligned.sink.tables`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from unaligned._util.fs import absolute_path
from unaligned.errors import SinkConfigurationError
from unaligned.options.declaration import OptionSpec
from unaligned.options.parsing import parse_bool, parse_choice, parse_duration_ms, parse_positive

_TABLES = ("Iceberg", "Delta")
#: The table targets' own options (``path`` and ``compression`` are declared with the file
#: target's in :mod:`unaligned.sink.options`); read by hand below, as a group.
TABLE_SPECS: tuple[OptionSpec[str], ...] = (
    OptionSpec(
        "tableFormat",
        "`iceberg` or `delta`: commit each batch into that table, named by `path`",
        only_for=_TABLES,
    ),
    OptionSpec(
        "partitionBy",
        "the table's partition columns when the sink creates it (Iceberg also takes "
        "`day(ts)`, `bucket(16, id)`, `truncate(4, s)`...)",
        only_for=_TABLES,
    ),
    OptionSpec(
        "mergeSchema",
        "`true`: nullable columns the table lacks are added (Iceberg's writer spells it "
        "`merge-schema`, accepted too)",
        default="false",
        only_for=_TABLES,
    ),
    OptionSpec("merge-schema", "Iceberg's spelling of `mergeSchema`", only_for=_TABLES),
    OptionSpec("userMetadata", "a Delta commit's `userMetadata`", only_for=("Delta",)),
    OptionSpec(
        "catalog.*",
        "the Iceberg catalog's properties (`type`, `uri`, `warehouse`, `s3.endpoint`...; "
        "`catalog.name`); without `catalog.type` and `catalog.uri` an embedded SQLite catalog "
        "under `catalog.warehouse`",
        only_for=("Iceberg",),
    ),
    OptionSpec(
        "snapshot-property.*",
        "a property stamped on each Iceberg snapshot",
        only_for=("Iceberg",),
    ),
    OptionSpec(
        "storage.*",
        "deltalake's `storage_options` (`AWS_ENDPOINT_URL`...)",
        only_for=("Delta",),
    ),
)
KEEP_SNAPSHOTS: OptionSpec[int] = OptionSpec(
    "keepSnapshots",
    "N: once the table holds 2N snapshots, the sink expires all but the newest N (and "
    "this query's newest, and branch and tag heads) after its commit, so its commit time "
    "stays flat; expired snapshots can no longer be time-travelled to or read "
    "incrementally, their files stay. Unset: the sink expires nothing",
    parse_positive,
    only_for=("Iceberg",),
)
TABLE_TIMEOUT: OptionSpec[int] = OptionSpec(
    "tableTimeout",
    "how long the driver keeps asking again while the Iceberg catalog or the table's storage "
    "cannot be reached (refused, reset, a 5xx answer); past it the query fails naming them, "
    "and a restart commits the batch once",
    parse_duration_ms,
    "60s",
    only_for=_TABLES,
)
"""``keepSnapshots`` and ``tableTimeout`` are read through their parsers; declared apart from
:data:`TABLE_SPECS`, whose options are read by hand."""
CATALOG_PREFIX = "catalog."
STORAGE_PREFIX = "storage."
SNAPSHOT_PROPERTY_PREFIX = "snapshot-property."
DEFAULT_CATALOG_NAME = "default"
SQLITE_CATALOG_FILE = "unaligned-catalog.db"

_TRANSFORM = re.compile(
    r"^(?:(identity|years?|months?|days?|hours?|void)\(\s*([^,()\s]+)\s*\)"
    r"|(bucket|truncate)\(\s*(\d+)\s*,\s*([^,()\s]+)\s*\)"
    r"|([^,()\s]+))$",
    re.IGNORECASE,
)


class TableFormat(enum.Enum):
    """``tableFormat``: which table the sink commits into."""

    ICEBERG = "iceberg"
    DELTA = "delta"

    @property
    def title(self) -> str:
        return "Iceberg" if self is TableFormat.ICEBERG else "Delta"


@dataclass(frozen=True)
class PartitionField:
    """One entry of ``partitionBy``: ``transform`` is ``identity``, ``year``, ``month``,
    ``day``, ``hour``, ``bucket`` or ``truncate`` (``width`` for the last two)."""

    column: str
    transform: str = "identity"
    width: int | None = None

    def spelled(self) -> str:
        if self.transform == "identity":
            return self.column
        if self.width is not None:
            return f"{self.transform}({self.width}, {self.column})"
        return f"{self.transform}({self.column})"


@dataclass(frozen=True)
class TableTarget:
    """A table the sink commits each batch into, with one table commit per batch.

    ``location`` is the Delta table's URI or path (absolute), or the Iceberg identifier;
    ``properties`` are Iceberg's catalog properties (``catalog.*``) or Delta's storage options
    (``storage.*``, keys upper-cased as deltalake documents them)."""

    format: TableFormat
    location: str
    partition_by: tuple[PartitionField, ...] = ()
    merge_schema: bool = False
    compression: str = "snappy"
    catalog_name: str = DEFAULT_CATALOG_NAME
    properties: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """May hold secrets (keys, tokens): never in a repr."""
    snapshot_properties: tuple[tuple[str, str], ...] = ()
    user_metadata: str | None = None
    timeout_ms: int = 60_000
    """``tableTimeout``: how long an unreachable catalog or store is asked again."""
    keep_snapshots: int | None = None

    @property
    def options(self) -> dict[str, str]:
        return dict(self.properties)

    def describe(self) -> str:
        if self.format is TableFormat.ICEBERG:
            return f"Iceberg table {self.location} (catalog {self.catalog_name!r})"
        return f"Delta table {self.location}"

    def reached_through(self) -> str:
        """What the sink contacts for the table: the catalog's type and URI (credentials in
        the URI left out), or the Delta table's location."""
        if self.format is TableFormat.DELTA:
            return f"the store at {self.location}"
        props = self.options
        uri = re.sub(r"//[^/@]*@", "//", props.get("uri", ""))
        kind = props.get("type") or props.get("py-catalog-impl") or "default"
        return f"the {kind} catalog" + (f" at {uri}" if uri else "")


def is_table_option(key: str) -> bool:
    """A prefixed option only a table target reads (keys lower-cased)."""
    return key.startswith((CATALOG_PREFIX, STORAGE_PREFIX, SNAPSHOT_PROPERTY_PREFIX))


def table_format(opts: Mapping[str, str]) -> TableFormat | None:
    """``tableFormat`` parsed, or ``None`` when the option is absent."""
    raw = opts.get("tableformat")
    if raw is None:
        return None
    return TableFormat(
        parse_choice("tableFormat", raw.strip().lower(), [f.value for f in TableFormat])
    )


def parse_table_target(opts: Mapping[str, str], fmt: TableFormat, compression: str) -> TableTarget:
    """The table target of options ``opts`` (lower-cased keys); refuses what the format does
    not read, naming the option."""
    path = opts.get("path", "").strip()
    if not path:
        example = "'db.events'" if fmt is TableFormat.ICEBERG else "'/data/events'"
        raise SinkConfigurationError(
            f"tableFormat={fmt.value} needs option 'path': the {fmt.title} table "
            f"({'its identifier' if fmt is TableFormat.ICEBERG else 'its location'}, e.g. "
            f"{example})"
        )
    _refuse_other_format(opts, fmt)
    partition_by = parse_partition_by(opts.get("partitionby", ""), fmt)
    merge = _merge_schema(opts)
    timeout_ms = TABLE_TIMEOUT.value(opts)
    if fmt is TableFormat.DELTA:
        storage = tuple(
            sorted(
                (k[len(STORAGE_PREFIX) :].upper(), v)
                for k, v in opts.items()
                if k.startswith(STORAGE_PREFIX)
            )
        )
        return TableTarget(
            fmt,
            absolute_path(path),
            partition_by,
            merge,
            compression,
            properties=storage,
            user_metadata=opts.get("usermetadata"),
            timeout_ms=timeout_ms,
        )
    if "." not in path or path.startswith(".") or path.endswith("."):
        raise SinkConfigurationError(
            f"tableFormat=iceberg: option 'path' must name the table as 'namespace.table', "
            f"got {path!r}"
        )
    catalog = {k[len(CATALOG_PREFIX) :]: v for k, v in opts.items() if k.startswith(CATALOG_PREFIX)}
    name = catalog.pop("name", DEFAULT_CATALOG_NAME).strip() or DEFAULT_CATALOG_NAME
    catalog = _embedded_catalog_defaults(catalog)
    snapshot = tuple(
        sorted(
            (k[len(SNAPSHOT_PROPERTY_PREFIX) :], v)
            for k, v in opts.items()
            if k.startswith(SNAPSHOT_PROPERTY_PREFIX)
        )
    )
    return TableTarget(
        fmt,
        path,
        partition_by,
        merge,
        compression,
        catalog_name=name,
        properties=tuple(sorted(catalog.items())),
        snapshot_properties=snapshot,
        timeout_ms=timeout_ms,
        keep_snapshots=KEEP_SNAPSHOTS.value_or_none(opts),
    )


def _merge_schema(opts: Mapping[str, str]) -> bool:
    given = [
        (n, opts[k])
        for n, k in (("mergeSchema", "mergeschema"), ("merge-schema", "merge-schema"))
        if k in opts
    ]
    values = {parse_bool(n, v) for n, v in given}
    if len(values) > 1:
        raise SinkConfigurationError(
            "options 'mergeSchema' and 'merge-schema' disagree; give one of them"
        )
    return values.pop() if values else False


def _refuse_other_format(opts: Mapping[str, str], fmt: TableFormat) -> None:
    if fmt is TableFormat.DELTA:
        wrong = [
            k
            for k in opts
            if k.startswith((CATALOG_PREFIX, SNAPSHOT_PROPERTY_PREFIX)) or k == "keepsnapshots"
        ]
        other = "Iceberg"
    else:
        wrong = [k for k in opts if k.startswith(STORAGE_PREFIX) or k == "usermetadata"]
        other = "Delta"
    if wrong:
        raise SinkConfigurationError(
            f"option '{sorted(wrong)[0]}' applies to the {other} sink only; this query writes "
            f"to the {fmt.title} sink (tableFormat={fmt.value})"
        )


def _embedded_catalog_defaults(catalog: dict[str, str]) -> dict[str, str]:
    """Without ``type`` and ``uri``: the embedded SQLite catalog under ``warehouse``."""
    if "type" in catalog or "uri" in catalog:
        return catalog
    warehouse = catalog.get("warehouse", "").strip()
    if not warehouse:
        raise SinkConfigurationError(
            "tableFormat=iceberg needs a catalog: option 'catalog.warehouse' (a local path or "
            "URI: the embedded SQLite catalog and the tables' files go there), or "
            "'catalog.type' / 'catalog.uri' with the catalog's properties (e.g. "
            "catalog.type=rest, catalog.uri=http://...)"
        )
    if "://" in warehouse:
        raise SinkConfigurationError(
            f"the embedded SQLite catalog keeps its database under 'catalog.warehouse', which "
            f"must then be a local path, got {warehouse!r}; for object storage give "
            "'catalog.uri' (e.g. sqlite:////path/catalog.db or a REST catalog's URL)"
        )
    local = absolute_path(warehouse)
    return {
        **catalog,
        "type": "sql",
        "uri": f"sqlite:///{local}/{SQLITE_CATALOG_FILE}",
        "warehouse": f"file://{local}",
    }


def parse_partition_by(raw: str, fmt: TableFormat) -> tuple[PartitionField, ...]:
    """``partitionBy``: comma-separated columns, or Iceberg transforms such as ``day(ts)``."""
    fields: list[PartitionField] = []
    for part in _split_top_level(raw):
        match = _TRANSFORM.match(part)
        if match is None:
            raise SinkConfigurationError(
                f"option 'partitionBy': cannot read {part!r}; give columns, or for Iceberg "
                "transforms such as day(ts), bucket(16, id), truncate(4, name)"
            )
        name, column, sized, width, sized_column, plain = match.groups()
        if plain is not None:
            field = PartitionField(plain)
        elif name is not None:
            field = PartitionField(column, _transform_name(name))
        else:
            field = PartitionField(sized_column, sized.lower(), int(width))
        if fmt is TableFormat.DELTA and field.transform != "identity":
            raise SinkConfigurationError(
                f"option 'partitionBy': Delta tables are partitioned by columns' values; "
                f"{part!r} is a transform (add a column computed from it instead)"
            )
        if field.column.lower() in {
            f.column.lower() for f in fields if f.transform == field.transform
        }:
            raise SinkConfigurationError(f"option 'partitionBy' names {part!r} twice")
        fields.append(field)
    return tuple(fields)


def _transform_name(name: str) -> str:
    lowered = name.lower()
    return lowered[:-1] if lowered in ("years", "months", "days", "hours") else lowered


def _split_top_level(raw: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in raw:
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current.append(char)
    parts.append("".join(current).strip())
    return [p for p in parts if p]
