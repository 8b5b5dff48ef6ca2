"""The pipelines config's `table` section: the Iceberg table a pipeline commits to, each key declared once."""

from __future__ import annotations

import re
from collections.abc import Mapping

from kinesis_replay.core.config_spark import as_text
from kinesis_replay.core.options import exact, option, section

# pyiceberg's catalog types (pyiceberg.catalog.CatalogType; a unit test keeps the two equal): catalog_properties.type
# is checked against them when the config is parsed, without importing pyiceberg.
CATALOG_TYPES = ("rest", "hive", "glue", "dynamodb", "sql", "in-memory", "bigquery")
EMBEDDED_CATALOG = "kinesis_replay"  # the name of the default catalog: pyiceberg's SQL catalog on a SQLite file
DEFAULT_NAMESPACE = "kinesis_replay"
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")  # what Glue, Athena and the SQL catalog all accept
# Put before a default table name that would start with a digit (a pipeline name may, an identifier may not). A letter,
# not '_': Athena wants a name that starts with '_' quoted in DDL.
DEFAULT_TABLE_PREFIX = "p_"


def default_table_name(pipeline_name: str) -> str:
    """The table a pipeline that names none commits to: its name with '-' as '_', and ``p_`` before a leading digit.

    A valid identifier for every valid pipeline name (``2024-orders`` -> ``p_2024_orders``); a name that starts with a
    letter keeps the table it always had (``orders-eu`` -> ``orders_eu``).
    """
    name = pipeline_name.replace("-", "_")
    return f"{DEFAULT_TABLE_PREFIX}{name}" if name[:1].isdigit() else name


QUARANTINE_SUFFIX = "_quarantine"  # the quarantine table's name is the table's with this after it, unless configured
DEFAULT_TABLE_RULE = f"'-' becomes '_', and a leading digit gets {DEFAULT_TABLE_PREFIX!r} in front"
_IDENTIFIER_RULE = "letters, digits and `_`, starting with a letter or `_`"


def _catalog_properties(value: object) -> dict[str, str]:
    properties = value or {}
    if not isinstance(properties, Mapping):
        raise ValueError(f"must be a mapping of pyiceberg catalog properties (type, uri, warehouse, glue.region...), got {properties!r}")
    for k, v in properties.items():
        if not isinstance(k, str) or isinstance(v, (Mapping, list)) or v is None:
            raise ValueError(f"{k!r} must be a scalar property, got {v!r}")
        exact(k, "the property ")
    return as_text(properties)


@section
class TableConfig:
    """The Iceberg table a pipeline commits its batches to: a catalog, a namespace and a table name.

    ``catalog_properties`` are pyiceberg's own (``type``, ``uri``, ``warehouse``, ``glue.region``...), as its docs
    name them; empty means the embedded catalog: pyiceberg's SQL catalog on a SQLite file under the output root,
    which needs no server. The table's location is always the pipeline's output root.
    """

    name: str = option(
        f"the table's name: {_IDENTIFIER_RULE}. Two pipelines may not name one table of a shared catalog (same catalog, "
        "namespace and name, in any case); each embedded catalog is its pipeline's own",
        shown=f"the pipeline's name with `-` as `_`, and `{DEFAULT_TABLE_PREFIX}` before a leading digit "
        f"(`2024-orders` → `{default_table_name('2024-orders')}`)",
    )
    namespace: str = option(f"the table's namespace: {_IDENTIFIER_RULE}", default=DEFAULT_NAMESPACE)
    catalog: str = option(f"the catalog's name: {_IDENTIFIER_RULE}", default=EMBEDDED_CATALOG)
    quarantine_name: str | None = option(
        "the quarantine table's name (the records that could not be decoded, beside the table in its catalog and namespace): "
        f"{_IDENTIFIER_RULE}",
        default=None,
        shown=f"the table's name and `{QUARANTINE_SUFFIX}` (`orders` → `orders{QUARANTINE_SUFFIX}`)",
    )
    catalog_properties: Mapping[str, str] = option(
        "pyiceberg's catalog properties, as its docs name them",
        default_factory=dict,
        shown="{default} (the embedded SQL catalog under the output)",
        parse=_catalog_properties,
    )

    @property
    def embedded(self) -> bool:
        return not self.catalog_properties

    @property
    def identifier(self) -> str:
        """``namespace.name``, as pyiceberg's ``load_table`` takes it."""
        return f"{self.namespace}.{self.name}"

    @property
    def key(self) -> tuple[str, str, str] | None:
        """What two pipelines' tables are compared by: catalog, namespace and name, in lower case (Glue and Athena
        fold case). None for the embedded catalog: each lives under its own pipeline's output root, so two embedded
        tables of one name are two tables."""
        if self.embedded:
            return None
        return self.catalog.lower(), self.namespace.lower(), self.name.lower()

    @property
    def quarantine(self) -> str:
        """The quarantine table's name: configured, or the table's with ``_quarantine`` after it."""
        return self.quarantine_name or f"{self.name}{QUARANTINE_SUFFIX}"

    @property
    def quarantine_identifier(self) -> str:
        return f"{self.namespace}.{self.quarantine}"

    def keys(self) -> tuple[tuple[str, str, str], ...]:
        """The keys of both of the pipeline's tables, its own and its quarantine table (none for the embedded catalog)."""
        if self.key is None:
            return ()
        return self.key, (self.key[0], self.key[1], self.quarantine.lower())

    def describe_quarantine(self) -> str:
        kind = "sql, embedded" if self.embedded else str(self.catalog_properties.get("type", "catalog"))
        return f"quarantine table {self.quarantine_identifier} in catalog {self.catalog} ({kind})"

    def describe(self) -> str:
        """The table's identity for people: ``table kinesis_replay.demo in catalog kinesis_replay (sql, embedded)``."""
        kind = "sql, embedded" if self.embedded else str(self.catalog_properties.get("type", "catalog"))
        return f"table {self.identifier} in catalog {self.catalog} ({kind})"
