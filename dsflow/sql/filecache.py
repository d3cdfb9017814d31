"""Parsed SQL files in the load cache: a file whose rendered text is unchanged is not parsed again.

Parsing (sqlglot's tokenizer and parser) was ~60% of `dsflow plan` with the resolved SELECTs cached
(docs/benchmarks.md, "Plan time: profile and fixes"). What loading needs of a statement on a warm run is
plain data (kind, name, columns, properties, locations, the names of the relations its SELECT reads); only a
SELECT that is resolved again (its text or a relation it reads changed) needs its sqlglot tree. So a file's
statements are stored as plain data, and each SELECT is a `DeferredSelect`: the first time one of them is used,
the file's text is parsed again (once per file), which gives the exact tree and node locations of a cold run.

Only files that parsed without a diagnostic are stored, and only statements whose `extra` this module can
encode. The entry's key is a hash of the file's path and rendered text (the cache's identity covers the
parser's code, load/cache.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from dsflow.errors import Location
from dsflow.sql.statements import AccessStatement, RawColumn, RawProperty, RawStatement


def file_key(path: str, text: str) -> str:
    """The cache key of one rendered file."""
    return hashlib.sha256(path.encode() + b"\0" + text.encode()).hexdigest()


class FileParse:
    """The statements of one file, parsed the first time a DeferredSelect of that file is used."""

    __slots__ = ("_parse", "_statements")

    def __init__(self, parse: Callable[[], list[RawStatement]]):
        self._parse = parse
        self._statements: list[RawStatement] | None = None

    def select(self, index: int) -> Any:
        if self._statements is None:
            self._statements = self._parse()
        return self._statements[index].select


class DeferredSelect:
    """A statement's SELECT read from the cache: attribute access parses the file and delegates to the tree."""

    __slots__ = ("_file", "_index")

    def __init__(self, file: FileParse, index: int):
        self._file = file
        self._index = index

    def tree(self) -> Any:
        """The sqlglot tree of the SELECT, exactly as a cold parse of the file makes it."""
        return self._file.select(self._index)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tree(), name)


def encode_statements(statements: list[RawStatement], path: str) -> list[list] | None:
    """Plain JSON data for a file's statements, or None when one carries something this module cannot encode."""
    out = []
    for st in statements:
        access = st.extra.get("access")
        locations = [st.location, *(c.location for c in st.columns), *(p.location for p in st.properties),
                     *(loc for _, loc in st.extra.get("partition_by", ())), *_access_locations(access)]
        if set(st.extra) - {"partition_by", "access"} or any(loc.file != path for loc in locations):
            return None
        out.append([st.kind, list(st.name), _loc(st.location),
                    [[c.name, c.type, *_loc(c.location)] for c in st.columns],
                    list(st.primary_key), [[p.key, p.value, *_loc(p.location)] for p in st.properties],
                    st.select is not None, st.text, [list(parts) for parts in st.source_parts],
                    [[name, *_loc(loc)] for name, loc in st.extra.get("partition_by", ())],
                    _encode_access(access)])
    return out


def decode_statements(data: list[list], path: str, parse: Callable[[], list[RawStatement]]) -> list[RawStatement]:
    """The statements of `encode_statements`; their SELECTs parse the file (with `parse`) when first used."""
    file = FileParse(parse)
    return [decode_statement(item, path, file, index) for index, item in enumerate(data)]


def decode_statement(item: list, path: str, file: FileParse, index: int) -> RawStatement:
    """One statement of `encode_statements`, the `index`-th of its file (whose parse `file` defers)."""
    kind, name, loc, columns, pk, props, is_query, text, sources, partition_by, access = item
    extra: dict[str, Any] = {"partition_by": tuple((n, Location(path, line, col)) for n, line, col in partition_by)} \
        if partition_by else {}
    if access is not None:
        extra["access"] = _decode_access(access, path)
    return RawStatement(
        kind, tuple(name), Location(path, *loc),
        columns=tuple(RawColumn(n, t, Location(path, line, col)) for n, t, line, col in columns),
        primary_key=tuple(pk),
        properties=tuple(RawProperty(k, v, Location(path, line, col)) for k, v, line, col in props),
        select=DeferredSelect(file, index) if is_query else None, text=text, extra=extra,
        source_parts=tuple(tuple(parts) for parts in sources))


def _access_locations(access: AccessStatement | None) -> list[Location]:
    if access is None:
        return []
    return [access.location, *(loc for _, loc in access.privileges),
            *([access.object_location] if access.object_location is not None else [])]


def _encode_access(access: AccessStatement | None) -> list | None:
    """A GRANT/REVOKE/CREATE ROLE statement (sql/access_sql.py) as plain data."""
    if access is None:
        return None
    return [access.action, _loc(access.location), access.role,
            [[privilege, *_loc(loc)] for privilege, loc in access.privileges], access.object_type,
            list(access.object_name), _loc(access.object_location) if access.object_location is not None else None,
            access.user, list(access.inherits)]


def _decode_access(item: list, path: str) -> AccessStatement:
    action, loc, role, privileges, object_type, object_name, object_loc, user, inherits = item
    return AccessStatement(
        action, Location(path, *loc), role,
        tuple((privilege, Location(path, line, col)) for privilege, line, col in privileges), object_type,
        tuple(object_name), Location(path, *object_loc) if object_loc is not None else None, user, tuple(inherits))


def _loc(location: Location) -> list[int]:
    return [location.line, location.col]
