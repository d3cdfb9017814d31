"""A cache of resolved SELECTs between runs: the slowest part of loading, skipped when nothing it reads changed.

Resolving SELECTs (sqlglot's qualify + annotate_types, load/select.py) took ~50% of `dsflow plan` on a
1,000-relation project (docs/benchmarks.md, "Plan time: where it goes"). A SELECT's resolution depends only on
the statement's text, the relations it reads (their fqn, kind, columns, ...) and the code that does it, so it
is stored under a hash of exactly these and reused while the hash matches, like dbt's partial parse.
Parsed files are not cached: rebuilding sqlglot trees from a file (sqlglot.serde) cost about as much as
parsing them again at 10,000 relations.

- Where: `<state.path>/cache/load-<environment>.json` (`.dsflow/cache/` by default), one JSON object, written
  atomically at the end of a load when something new was stored; entries not used by that load are dropped.
- Only clean results are stored: a statement that reported any diagnostic is resolved again every time, and
  so is one whose text holds a secret's value (nothing secret is written to disk).
- `DSFLOW_CACHE=0` turns it off (nothing read or written); an unreadable or foreign file is ignored.
- JSON only (no pickle): a value is rebuilt from field names and dsflow's own model classes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlglot
from pydantic import BaseModel
from sqlglot import exp

from dsflow.core import model
from dsflow.load.dialect import WINDOW_FUNCTIONS

FORMAT = 1
CACHE_ENV = "DSFLOW_CACHE"
CODE = ("load/*.py", "core/*.py")
"""Modules whose source goes into the cache's identity: any change to the loader or the models empties it."""


def _code_hash() -> str:
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(f"{FORMAT} {sqlglot.__version__}".encode())
    for pattern in CODE:
        for path in sorted(root.glob(pattern)):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


class SelectCache:
    """Resolved SELECTs by key, loaded from and saved to one file (or in memory only when `path` is None)."""

    def __init__(self, path: Path | None):
        self.path = path
        self.code = _code_hash()
        self.entries: dict[str, Any] = self._read() if path is not None else {}
        self.used: dict[str, Any] = {}
        self.dirty = False

    @classmethod
    def for_project(cls, root: Path, state_path: str, environment: str) -> SelectCache | None:
        """The cache of one environment of a project folder (environments do not evict each other's entries),
        or None when DSFLOW_CACHE=0."""
        if os.environ.get(CACHE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
            return None
        return cls(root / state_path / "cache" / f"load-{environment}.json")

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        ok = isinstance(data, dict) and data.get("code") == self.code and isinstance(data.get("entries"), dict)
        return data["entries"] if ok else {}

    def key(self, text: str, relations: list[model.Relation]) -> str:
        """A hash of the statement text and everything about the relations it reads except where they were declared."""
        digest = hashlib.sha256(text.encode())
        for relation in relations:
            digest.update(b"\0" + relation.model_dump_json(exclude={"location"}).encode())
        return digest.hexdigest()

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

    def save(self) -> None:
        """Write what this load used (dropping the rest), atomically; a read-only folder is not an error."""
        if self.path is None or (not self.dirty and len(self.used) == len(self.entries)):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"code": self.code, "entries": self.used}, separators=(",", ":")))
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


def read_relations(select: exp.Expr, relations: dict[str, model.Relation],
                   qualify_name: Callable[[list[str]], str]) -> list[model.Relation] | None:
    """The relations a SELECT reads, in order, or None if one is unknown (the full resolution reports it)."""
    found = []
    for table in select.find_all(exp.Table):
        if isinstance(table.this, WINDOW_FUNCTIONS):
            continue
        relation = relations.get(qualify_name([p.name for p in table.parts]))
        if relation is None:
            return None
        found.append(relation)
    return found
