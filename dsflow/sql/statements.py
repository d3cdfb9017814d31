"""The data of a SQL statement before and after its SELECT is resolved, free of sqlglot.

Kept apart from the parser (sql/parse.py) and the resolver (sql/select.py) so that a load whose files and
SELECTs all come from the load cache (load/cache.py, sql/filecache.py) does not import sqlglot at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from dsflow.core.model import (
    ORGANIZATION, PRIVILEGES, ChainedChangelogJoin, ChangelogJoin, Column, IntervalJoin, Nested, RegularJoin, Source,
    OverWindow, Stacked, TemporalJoin, TopN, Window,
)
from dsflow.errors import Location

RELATION_KINDS = {"RELATION": None, "STREAM": "stream", "CHANGELOG": "changelog",
                  "MATERIALIZED VIEW": "materialized_view", "TABLE": "table"}
"""The object types of GRANT ... ON <type> that name a relation, and the kind each one requires."""
OBJECT_TYPES = {"DATABASE": "database", "SCHEMA": "schema", "STORE": "store", "QUERY": "query",
                "ORGANIZATION": ORGANIZATION, **{k: "relation" for k in RELATION_KINDS}}
ALL_PRIVILEGES = tuple(dict.fromkeys(p for names in PRIVILEGES.values() for p in names))


@dataclass(frozen=True)
class AccessStatement:
    """One GRANT, REVOKE, GRANT ROLE, REVOKE ROLE or CREATE ROLE statement of a .sql file."""

    action: str  # "grant" | "revoke" | "grant_role" | "revoke_role" | "create_role"
    location: Location
    role: str = ""
    privileges: tuple[tuple[str, Location], ...] = ()
    object_type: str = ""  # as written: DATABASE, STREAM, MATERIALIZED VIEW, ...
    object_name: tuple[str, ...] = ()
    object_location: Location | None = None
    user: str = ""
    inherits: tuple[str, ...] = ()


@dataclass(frozen=True)
class RawProperty:
    """One `'key' = value` of a WITH clause."""

    key: str
    value: str
    location: Location


@dataclass(frozen=True)
class RawColumn:
    """One column of a CREATE statement's column list, its type as written (normalized)."""

    name: str
    type: str
    location: Location


@dataclass(frozen=True)
class RawExpectation:
    """One `CONSTRAINT name EXPECT (condition) ON VIOLATION action` clause of a query, as written."""

    name: str
    condition: str
    """The condition's text between the parentheses."""
    action: str
    """warn, drop, dead_letter or fail (WARN, DROP ROW, DEAD LETTER, FAIL QUERY)."""
    location: Location
    """Where the clause starts (its CONSTRAINT)."""
    condition_location: Location
    """Where the condition's text starts."""


@dataclass(frozen=True)
class RawStatement:
    """A parsed DDL or DML statement, before names are resolved."""

    kind: str  # "stream" | "changelog" | "materialized view" | "insert"
    name: tuple[str, ...]
    location: Location
    columns: tuple[RawColumn, ...] = ()
    primary_key: tuple[str, ...] = ()
    properties: tuple[RawProperty, ...] = ()
    select: Any = None  # an sqlglot exp.Query
    """The SELECT's tree; for a statement read from the load cache a stand-in that parses its file when first
    used (sql/filecache.py)."""
    text: str = ""
    extra: dict = field(default_factory=dict)
    source_parts: tuple[tuple[str, ...], ...] = ()
    """The name parts of the relations the SELECT reads, in order (`source_tables`), known without its tree."""

    @property
    def is_query(self) -> bool:
        return self.select is not None

    def prop(self, key: str) -> RawProperty | None:
        for prop in self.properties:  # a loop, not next(genexpr): called ~14 times per statement
            if prop.key == key:
                return prop
        return None

    def prop_location(self, key: str) -> Location | None:
        """Where property `key` is written; None if the statement has none."""
        prop = self.prop(key)
        return prop.location if prop else None


@dataclass(frozen=True)
class Analysed:
    """A resolved SELECT: normalized SQL over fully qualified relations, and what kind of query it makes."""

    select_sql: str
    sources: tuple[Source, ...]
    columns: tuple[Column, ...]
    aggregated: bool = False
    group_keys: tuple[str, ...] = ()
    window: Window | None = None
    join_within: str | None = None
    join_side: str | None = None
    temporal: TemporalJoin | None = None
    changelog_join: ChangelogJoin | None = None
    chain: tuple[IntervalJoin | TemporalJoin | ChainedChangelogJoin, ...] = ()
    top_n: TopN | None = None
    over: OverWindow | None = None
    regular: tuple[RegularJoin, ...] = ()
    nested: tuple[Nested, ...] = ()
    """Windowed aggregations read as subqueries (sql/nested.py)."""
    stacked: Stacked | None = None
    """An aggregation read as a subquery by the query's GROUP BY (sql/stacked.py)."""

    @property
    def output_mode(self) -> Literal["append", "update"]:
        """An aggregation's rows are updates of their groups, but a windowed one over an interval join, and one over
        windowed subqueries, is appended (each window once, when the watermark passes its end: sql/windowed_join.py,
        sql/nested.py); the rest is appended."""
        if self.aggregated and not self.nested and not (self.window is not None and self.join_within is not None):
            return "update"
        return "append"

    @property
    def stateful(self) -> bool:
        return (self.aggregated or self.join_within is not None or self.temporal is not None
                or self.changelog_join is not None or self.top_n is not None or bool(self.regular)
                or self.over is not None
                or bool(self.nested))
