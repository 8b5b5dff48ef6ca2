"""payload.schema against the table's columns, by Iceberg's rules: each field unchanged, added, widened, renamed, kept or
refused, decided with no table at hand (the adapter gives the columns, as core values).

Iceberg changes a column in place in three ways only, each of which every reader can follow: it adds one (null in the
rows before it), widens a type (``int`` to ``long``, ``float`` to ``double``, a ``decimal``'s precision up with its scale
kept) and renames one (by its field id: files that name it the old way are read through the table's name mapping).
A column payload.schema no longer declares stays in the table, null in new batches. Anything else is refused before a
batch is read, naming the column, the table's type and the new one: a narrowing (values the table holds may not fit),
a change of kind (``int`` to ``string``), a decimal's scale (pyiceberg 0.12's own check lets that one through: it
compares the new scale with itself), and any change inside a nested type (a struct's fields, an array's element, a
map's key or value), which this pipeline does not evolve: such a column must keep its type, or land under a new name.

The same rules decide what a commit does with a batch's files (``file_changes``), with one difference: a file's column
narrower than the table's (a batch written before its column was widened, committed again by a restore) is read
widened, as Iceberg reads every older file, and a column named as it was before a rename is that column.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from kinesis_replay.core.config import RECORD_COLUMNS, PipelineConfig, rebuilt
from kinesis_replay.core.ddl import DdlType, ddl_name, parse_ddl_schema

# payload.schema's types as the replay's files land in the table (adapters/json_columns' Arrow types, as pyiceberg
# reads them): Spark's TINYINT, SMALLINT and INT are all Iceberg's int, TIMESTAMP is timestamptz, TIMESTAMP_NTZ timestamp.
_LANDS_AS = {
    "boolean": "boolean", "tinyint": "int", "smallint": "int", "int": "int", "bigint": "long", "float": "float",
    "double": "double", "string": "string", "binary": "binary", "date": "date", "timestamp": "timestamptz",
    "timestamp_ntz": "timestamp",
}  # fmt: skip
# An Iceberg type as payload.schema declares it (int: INT, though TINYINT and SMALLINT land as int too).
_DECLARED_AS = {
    "boolean": "BOOLEAN", "int": "INT", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE", "string": "STRING",
    "binary": "BINARY", "date": "DATE", "timestamptz": "TIMESTAMP", "timestamp": "TIMESTAMP_NTZ",
}  # fmt: skip
# Iceberg's widenings of a primitive type (a decimal's precision is widens()' own case).
_WIDER = {("int", "long"), ("float", "double")}
_NESTED = ("struct", "list", "map")
# A file whose record column (the release's own, never payload.schema's) differs from the table's.
_RECORD_FIX = (
    "it is a column every row carries, whose type no release changes: were the files written by another release's "
    "replay job? Replay the batch with this release's"
)


@dataclass(frozen=True)
class ColumnType:
    """A column's type as the table holds it, in Iceberg's names: ``kind`` is ``int``, ``long``, ``decimal``,
    ``timestamptz``, ``list``...; ``params`` a decimal's precision and scale; ``children`` a struct's fields, a list's
    ``element``, a map's ``key`` and ``value``, each as (name, type). Field ids and nullability are not part of it:
    every column the replay writes is optional, and ids are the table's business."""

    kind: str
    params: tuple[int, ...] = ()
    children: tuple[tuple[str, ColumnType], ...] = ()

    def __str__(self) -> str:
        """As Iceberg spells it: ``decimal(10, 2)``, ``list<int>``, ``map<string, long>``, ``struct<a: int>``."""
        if self.kind == "list":
            return f"list<{self.children[0][1]}>"
        if self.kind == "map":
            return f"map<{self.children[0][1]}, {self.children[1][1]}>"
        if self.kind == "struct":
            return "struct<" + ", ".join(f"{name}: {t}" for name, t in self.children) + ">"
        return self.kind + (f"({', '.join(map(str, self.params))})" if self.params else "")

    def declared(self) -> str:
        """As payload.schema would declare it (``INT``, ``DECIMAL(10,2)``, ``ARRAY<STRING>``); Iceberg's spelling for a
        type no JSON payload decodes into."""
        if self.kind == "list":
            return f"ARRAY<{self.children[0][1].declared()}>"
        if self.kind == "map":
            return f"MAP<{self.children[0][1].declared()}, {self.children[1][1].declared()}>"
        if self.kind == "struct":
            return "STRUCT<" + ", ".join(f"{ddl_name(name)}: {t.declared()}" for name, t in self.children) + ">"
        if self.kind == "decimal":
            return f"DECIMAL({','.join(map(str, self.params))})"
        return _DECLARED_AS.get(self.kind, str(self))


def column_type(t: DdlType) -> ColumnType:
    """The type a column of payload.schema's type ``t`` lands as in the table (config refuses the types no payload
    decodes into, such as VARIANT; they keep their own names here)."""
    if t.kind in _LANDS_AS:
        return ColumnType(_LANDS_AS[t.kind])
    if t.kind == "decimal":
        return ColumnType("decimal", t.params)
    if t.kind == "array":
        return ColumnType("list", (), (("element", column_type(t.children[0][1])),))
    if t.kind in ("map", "struct"):
        return ColumnType(t.kind, (), tuple((name, column_type(child)) for name, child in t.children))
    return ColumnType(t.kind, t.params)


@dataclass(frozen=True)
class TableColumn:
    """A top-level column of the table: its name, its type, and the other names its field id goes by in the table's name
    mapping (the names it had before a rename, which files written before it still use)."""

    name: str
    type: ColumnType
    aliases: tuple[str, ...] = ()


class Change(StrEnum):
    UNCHANGED = "unchanged"
    ADDED = "added"  # joins the table; null in the rows before
    PROMOTED = "promoted"  # the table's type widened, as Iceberg allows
    RENAMED = "renamed"  # the table's column renamed (and widened, when its type is wider)
    REMOVED = "removed"  # no longer in payload.schema: stays in the table, null in new batches
    REFUSED = "refused"
    REPLACED = "replaced"  # a rebuild's: a change Iceberg refuses in place, made by a new column of the name (a new field id)


@dataclass(frozen=True)
class FieldChange:
    """What happens to one column: ``name`` is payload.schema's (or the file's; a removed column's is the table's)."""

    name: str
    change: Change
    before: ColumnType | None = None  # the table's type; None for an added column
    after: ColumnType | None = None  # payload.schema's (or the file's); None for a removed column
    renamed_from: str | None = None  # the table's name for it, when payload.renamed_from renames it
    why: str = ""  # a refusal's reason
    fix: str = ""  # a refusal's way out, for this column

    @property
    def table_name(self) -> str:
        """The column's name in the table as it is now."""
        return self.renamed_from or self.name

    def describe(self) -> str:
        """A refused column, its types and the reason: ``column "amount": the table's int, now string (STRING), ...``."""
        where = f'column "{self.name}"' + (f' (renamed from "{self.renamed_from}")' if self.renamed_from else "")
        if self.before is None or self.after is None:
            return f"{where}: {self.why}"
        return f"{where}: the table's {self.before}, now {self.after} ({self.after.declared()}): {self.why}"


@dataclass(frozen=True)
class SchemaChanges:
    """Every column's change, in payload.schema's order (or the file's), the removed ones last."""

    fields: tuple[FieldChange, ...] = ()

    def of(self, change: Change) -> tuple[FieldChange, ...]:
        return tuple(f for f in self.fields if f.change == change)

    @property
    def refused(self) -> tuple[FieldChange, ...]:
        return self.of(Change.REFUSED)

    @property
    def replaced(self) -> tuple[FieldChange, ...]:
        return self.of(Change.REPLACED)

    @property
    def changes_table(self) -> bool:
        """Whether the table's schema changes: a column added, widened or renamed."""
        return any(f.change in (Change.ADDED, Change.PROMOTED, Change.RENAMED) for f in self.fields)


def widens(before: ColumnType, after: ColumnType) -> bool:
    """Whether Iceberg widens ``before`` to ``after`` in place: int to long, float to double, a decimal's precision up
    with its scale kept. (pyiceberg 0.12's ``promote`` also takes a decimal whose scale changed, and string to binary
    and back, which Iceberg's spec does not: this check is the project's, not pyiceberg's.)"""
    if (before.kind, after.kind) in _WIDER:
        return True
    if before.kind == after.kind == "decimal":
        (precision, scale), (wider, new_scale) = before.params, after.params
        return new_scale == scale and wider > precision
    return False


def _why(before: ColumnType, after: ColumnType) -> str:
    """Why Iceberg cannot turn ``before`` into ``after`` in place."""
    if before.kind == after.kind == "decimal":
        (precision, scale), (new_precision, new_scale) = before.params, after.params
        if new_scale != scale:
            return (
                f"its scale changes from {scale} to {new_scale}, which Iceberg never does: a decimal is stored as a whole "
                "number of its smallest unit, so the values landed so far would read as other numbers"
            )
        return f"its precision drops from {precision} to {new_precision}: values the table holds may not fit"
    if widens(after, before):
        return "that narrows it: Iceberg never narrows a column, and values the table holds may not fit"
    if before.kind == after.kind and before.kind in _NESTED:
        return "a field inside it changed: the pipeline adds, widens and renames top-level columns only"
    return "Iceberg widens int to long, float to double and a decimal's precision (its scale kept), and changes no type otherwise"


def payload_changes(pipeline: PipelineConfig, table: Sequence[TableColumn]) -> SchemaChanges:
    """What the pipeline's payload.schema (with its renamed_from) does to the table's ``table`` columns, by Iceberg's
    rules; the record's own columns are the release's and are left out. A raw payload declares no column: every payload
    column the table has is kept."""
    payload = pipeline.payload
    declared = parse_ddl_schema(payload.schema).children if payload.format == "json" and payload.schema else ()
    new = [(name, column_type(t)) for name, t in declared]
    return _decide(new, payload.renamed_from, table, RECORD_COLUMNS, planned=True)


def rebuild_changes(pipeline: PipelineConfig, table: Sequence[TableColumn]) -> SchemaChanges:
    """What a rebuild with payload.next_schema does to the table's columns: payload_changes' rules, except that a column
    whose type Iceberg cannot change in place (a narrowing, a change of kind, a decimal's scale) is replaced: the switch
    drops it and adds a new column of the name and the new type, which only the rebuilt files hold. A name refused for
    another reason (a case clash, an old name a rename still maps) stays refused. The pipeline's own schema with none."""
    found = payload_changes(rebuilt(pipeline), table)

    def typed(f: FieldChange) -> bool:  # refused for its type, not its name
        return f.change == Change.REFUSED and f.before is not None and f.after is not None

    return SchemaChanges(tuple(replace(f, change=Change.REPLACED, why="", fix="") if typed(f) else f for f in found.fields))


def file_changes(files: Sequence[tuple[str, ColumnType]], renamed_from: Mapping[str, str], table: Sequence[TableColumn]) -> SchemaChanges:
    """What a batch's file (its columns, the record's own among them) does to the table at its commit: the plan's rules,
    except that a column narrower than the table's fits (read widened: a batch of before the widening), and a column
    named as before a rename is that column (read through the name mapping: a batch of before the rename)."""
    found = _decide(files, renamed_from, table, (), planned=False)
    return SchemaChanges(tuple(replace(f, fix=_RECORD_FIX) if f.why and f.name in RECORD_COLUMNS else f for f in found.fields))


def _decide(
    new: Sequence[tuple[str, ColumnType]],
    renamed_from: Mapping[str, str],
    table: Sequence[TableColumn],
    fixed: Collection[str],
    planned: bool,
) -> SchemaChanges:
    by_name = {c.name: c for c in table if c.name not in fixed}
    by_alias = {alias: c for c in by_name.values() for alias in c.aliases if alias not in by_name}
    decided: list[FieldChange] = []
    taken: set[str] = set()  # the table's columns some new column is
    for name, after in new:
        source = renamed_from.get(name)
        column = by_name.get(name)
        if column is None and source is not None and source in by_name:
            column = by_name[source]
        elif column is None and not planned:
            column = by_alias.get(name)  # a file of before the rename names the column as it was
        if column is None:
            decided.append(_added(name, after, by_name, by_alias) if planned else FieldChange(name, Change.ADDED, None, after))
            continue
        taken.add(column.name)
        renamed = column.name if column.name != name and column.name == source else None
        decided.append(_compared(name, column, after, renamed, by_name, planned))
    kept = [FieldChange(c.name, Change.REMOVED, c.type) for c in by_name.values() if c.name not in taken]
    return SchemaChanges((*decided, *kept))


def _compared(
    name: str, column: TableColumn, after: ColumnType, renamed: str | None, by_name: Mapping[str, TableColumn], planned: bool
) -> FieldChange:
    """A column the table has (under ``renamed``, when payload.renamed_from renames it) against its new type."""
    before = column.type
    if renamed is not None:
        clash = _case_clash(name, by_name, renamed) if planned else None
        if clash is not None:
            return FieldChange(name, Change.REFUSED, None, after, renamed, *clash)
        if before == after or widens(before, after):
            return FieldChange(name, Change.RENAMED, before, after, renamed)
    elif before == after or (not planned and widens(after, before)):
        return FieldChange(name, Change.UNCHANGED, before, after)
    elif widens(before, after):
        return FieldChange(name, Change.PROMOTED, before, after)
    fix = (
        f"put back `{ddl_name(name)} {before.declared()}` (the table's type) in payload.schema, or land the new type under "
        f"a new name: declare `{ddl_name(name + '_v2')} {after.declared()}` instead (an added column; "
        f'"{column.name}" stays in the table, null in new batches)'
    )
    return FieldChange(name, Change.REFUSED, before, after, renamed, _why(before, after), fix)


def _added(name: str, after: ColumnType, by_name: Mapping[str, TableColumn], by_alias: Mapping[str, TableColumn]) -> FieldChange:
    """A column the table does not have: added, unless its name is taken in a way a reader would confuse."""
    if name in by_alias:
        owner = by_alias[name].name
        why = (
            f'"{name}" was the name of column "{owner}" before a rename, and the table\'s name mapping still reads files '
            f'written before it as "{owner}": a new column of that name would take their values'
        )
        return FieldChange(name, Change.REFUSED, None, after, None, why, f'give the new column another name than "{name}"')
    clash = _case_clash(name, by_name)
    if clash is not None:
        return FieldChange(name, Change.REFUSED, None, after, None, *clash)
    return FieldChange(name, Change.ADDED, None, after)


def _case_clash(name: str, by_name: Mapping[str, TableColumn], source: str | None = None) -> tuple[str, str] | None:
    """A new name that differs from another column's only in case: Spark, Athena and Glue match names in any case."""
    other = next((c.name for c in by_name.values() if c.name != source and c.name != name and c.name.lower() == name.lower()), None)
    if other is None:
        return None
    why = f'the table has column "{other}", and Spark, Athena and Glue match column names in any case'
    if source is not None:
        return why, f'rename "{source}" to another name'
    return why, f'to rename "{other}" to "{name}", say so in payload.renamed_from ({{{name}: {other}}}); else choose another name'
