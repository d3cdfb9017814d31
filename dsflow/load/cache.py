"""A cache of resolved SELECTs between runs: the slowest part of loading, skipped when nothing it reads changed.

Resolving SELECTs (sqlglot's qualify + annotate_types, sql/select.py) took ~50% of `dsflow plan` on a
1,000-relation project (docs/benchmarks.md, "Plan time: where it goes"). A SELECT's resolution depends only on
the statement's text, the relations it reads (their fqn, kind, columns, ...) and the code that does it, so it
is stored under a hash of exactly these and reused while the hash matches, like dbt's partial parse.
Parsed files are stored as plain data, not as sqlglot trees (rebuilding trees with sqlglot.serde cost about as
much as parsing again): a SELECT's tree is parsed again only when it is resolved again (sql/filecache.py).

- Where: `<state.path>/cache/load-<environment>.json` (`.dsflow/cache/` by default), one JSON object, written
  atomically at the end of a load when something new was stored; entries not used by that load are dropped.
  It holds two maps: resolved SELECTs (`entries`) and parsed files (`files`).
- Only clean results are stored: a statement that reported any diagnostic is resolved again every time, a file
  with a parse diagnostic is parsed again every time, and neither is stored when its text holds a secret's
  value (nothing secret is written to disk).
- `DSFLOW_CACHE=0` turns it off (nothing read or written); an unreadable or foreign file is ignored.
- JSON only (no pickle): a value is rebuilt from field names and dsflow's own model classes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from dsflow.core import model

FORMAT = 2
CACHE_ENV = "DSFLOW_CACHE"
CODE = ("load/*.py", "sql/*.py", "core/*.py")
"""Modules whose source goes into the cache's identity: any change to the loader or the models empties it."""


def _code_hash() -> str:
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(f"{FORMAT} ".encode() + _sqlglot_version())
    for pattern in CODE:
        for path in sorted(root.glob(pattern)):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _sqlglot_version() -> bytes:
    """sqlglot's version file, read without importing sqlglot (a warm load does not need it)."""
    spec = importlib.util.find_spec("sqlglot")
    version = Path(spec.origin).parent / "_version.py" if spec is not None and spec.origin else None
    if version is not None and version.is_file():
        return version.read_bytes()
    import sqlglot

    return sqlglot.__version__.encode()


class SelectCache:
    """Resolved SELECTs by key, loaded from and saved to one file (or in memory only when `path` is None)."""

    def __init__(self, path: Path | None):
        self.path = path
        self.code = _code_hash()
        self.entries: dict[str, Any] = {}
        self.files: dict[str, Any] = {}
        if path is not None:
            self.entries, self.files = self._read()
        self.used: dict[str, Any] = {}
        self.files_used: dict[str, Any] = {}
        self._file_texts: dict[str, str] = {}  # key -> rendered text of the files stored by this load
        self._dumps: dict[int, tuple[model.Relation, bytes]] = {}  # id -> (relation, its key bytes)
        self.dirty = False

    @classmethod
    def for_project(cls, root: Path, state_path: str, environment: str) -> SelectCache | None:
        """The cache of one environment of a project folder (environments do not evict each other's entries),
        or None when DSFLOW_CACHE=0."""
        if os.environ.get(CACHE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
            return None
        return cls(root / state_path / "cache" / f"load-{environment}.json")

    def _read(self) -> tuple[dict[str, Any], dict[str, Any]]:
        assert self.path is not None  # read only when there is a file
        try:
            data = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return {}, {}
        ok = isinstance(data, dict) and data.get("code") == self.code and isinstance(data.get("entries"), dict) \
            and isinstance(data.get("files"), dict)
        return (data["entries"], data["files"]) if ok else ({}, {})

    def key(self, text: str, relations: list[model.Relation]) -> str:
        """A hash of the statement text and everything about the relations it reads except where they were declared."""
        digest = hashlib.sha256(text.encode())
        for relation in relations:
            digest.update(b"\0" + self._dump(relation))
        return digest.hexdigest()

    def _dump(self, relation: model.Relation) -> bytes:
        """A relation's JSON without its location, computed once per relation object (read by many queries)."""
        known = self._dumps.get(id(relation))
        if known is None or known[0] is not relation:
            known = (relation, relation.model_dump_json(exclude={"location"}).encode())
            self._dumps[id(relation)] = known
        return known[1]

    def get_file(self, path: str, text: str, parse: Callable[[], list]) -> list | None:
        """The statements of a file parsed by an earlier load with this exact text, or None.
        Their SELECTs call `parse` (which must parse `text`) when first used (sql/filecache.py)."""
        from dsflow.sql.filecache import decode_statements, file_key

        key = file_key(path, text)
        raw = self.files.get(key)
        if raw is None:
            return None
        try:
            statements = decode_statements(raw, path, parse)
        except (TypeError, ValueError):
            return None
        self.files_used[key] = raw
        return statements

    def put_file(self, path: str, text: str, statements: list) -> None:
        """Store the statements of a file that parsed without a diagnostic (dropped at save if a secret is in it)."""
        from dsflow.sql.filecache import encode_statements, file_key

        raw = encode_statements(statements, path)
        if raw is None:
            return
        key = file_key(path, text)
        self.files_used[key] = raw
        self._file_texts[key] = text
        self.dirty = True

    def get(self, key: str, build: Callable[..., Any]) -> Any | None:
        """The value stored under `key` rebuilt with `build(**fields)`, or None."""
        raw = self.entries.get(key)
        if raw is None:
            return None
        try:
            value = build(**{name: _decode(v) for name, v in raw.items()})
        except (TypeError, ValueError, KeyError, AttributeError):
            return None
        self.used[key] = raw
        return value

    def put(self, key: str, value: Any) -> None:
        """Store a dataclass instance; values of a shape the encoder does not know are not stored."""
        try:
            raw = {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        except TypeError:
            return
        self.used[key] = raw
        self.dirty = True

    def save(self, secrets: set[str] | frozenset[str] = frozenset()) -> None:
        """Write what this load used (dropping the rest and any file new in this load whose text holds one of
        `secrets`), atomically; a read-only folder is not an error."""
        if self.path is None or (not self.dirty and len(self.used) == len(self.entries)
                                 and len(self.files_used) == len(self.files)):
            return
        files = {key: raw for key, raw in self.files_used.items()
                 if not any(secret and secret in self._file_texts.get(key, "") for secret in secrets)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"code": self.code, "entries": self.used, "files": files},
                                      separators=(",", ":")))
            os.replace(tmp, self.path)
        except OSError:
            pass


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, tuple):
        return {"t": [_encode(v) for v in value]}
    if isinstance(value, BaseModel) and getattr(model, type(value).__name__, None) is type(value):
        return {"m": type(value).__name__, "v": value.model_dump(mode="json")}
    raise TypeError(f"not cacheable: {type(value).__name__}")


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "t" in value:
            return tuple(_decode(v) for v in value["t"])
        cls = getattr(model, value["m"])
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            raise TypeError(value["m"])
        return cls.model_validate(value["v"])
    return value


def read_relations(source_parts: tuple[tuple[str, ...], ...], relations: dict[str, model.Relation],
                   qualify_name: Callable[[tuple[str, ...]], str]) -> list[model.Relation] | None:
    """The relations a SELECT reads (RawStatement.source_parts), in order, or None if one is unknown (the full
    resolution reports it)."""
    found = []
    for parts in source_parts:
        relation = relations.get(qualify_name(parts))
        if relation is None:
            return None
        found.append(relation)
    return found
