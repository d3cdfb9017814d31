"""A relation's physical object, in the pure core: its identity (a rename onto the same object is a move), its
name in words for the plan, which column changes leave it in place (rules in core/evolution.py), and what a
replay leaves in a sink."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsflow.core import stores
from dsflow.core.evolution import DEFAULT_RULE, Evolution, evolution, incompatibility
from dsflow.core.resources import fingerprint

LOGS = ("stream", "changelog")
TABLES = ("table", "materialized_view")

SINK_AFTER_REPLAY = {
    "stream": "the records it wrote before stay in its sink topic, so the replay writes them again (duplicates)",
    "changelog": "the rows it wrote before stay in its sink topic and are superseded by the replay's upserts",
    "materialized_view": "the view's rows are upserted again as the replay recomputes them",
    "table": "the table's rows are written again as the replay recomputes them",
}


def physical_key(data: dict[str, Any] | None) -> tuple[str, ...] | None:
    """A relation's physical identity: the object it lives in (store and topic, or store and table), None if it
    has none of its own."""
    if not data or "topic" not in data:
        return None
    holder = "table" if data.get("kind") in ("table", "materialized_view") else "log"
    return data.get("store", ""), holder, data["topic"], fingerprint(data.get("table_options") or {})


def physical_object(data: dict[str, Any], store_types: Mapping[str, str]) -> str:
    """A relation's physical object in words: '<store type> topic main/pageviews', '<store type> table ...', ...;
    a log is named by its store kind's `log_noun` (core/stores.py)."""
    kind, store = data.get("kind"), data.get("store", "")
    if kind in ("table", "materialized_view"):
        where = ", ".join(f"{k}={v}" for k, v in sorted((data.get("table_options") or {}).items()))
        return f"{store_types.get(store, '')} table {data.get('topic')}".strip() + (f" ({where})" if where else "")
    return f"{store_types.get(store, '')} {log_noun(data, store_types)} {store}/{data.get('topic')}".strip()


def log_noun(data: dict[str, Any], store_types: Mapping[str, str]) -> str:
    """What a relation's log is called in its store kind ('topic', 'stream'; core/stores.py `log_noun`)."""
    found = stores.kind(store_types.get(data.get("store", ""), ""))
    return found.log_noun if found is not None and found.can(stores.Capability.LOGS) else "topic"


def log_size(data: dict[str, Any], store_types: Mapping[str, str]) -> str:
    """'2 partitions', '1 shard': a relation's log size (its data's `partitions`) in its store kind's words."""
    found = stores.kind(store_types.get(data.get("store", ""), ""))
    size = data.get("partitions")
    return f"{size} {found.size_noun if found is not None else 'partition'}{'' if size == 1 else 's'}"


@dataclass(frozen=True)
class ColumnChange:
    """A relation change of its columns only: what changed, and why it cannot be made in place (None: in place:
    the topic or table and its records are kept)."""

    evolution: Evolution
    rule: str
    refused: str | None


def column_change(before: dict[str, Any], after: dict[str, Any], rule: str | None,
                  history: list[Any] | None = None) -> ColumnChange | None:
    """None unless only the columns of a stream, changelog, table or materialized view changed. A stream or
    changelog evolves by its compatibility rule (core/evolution.py; `history`: earlier column lists, oldest
    first, for the _TRANSITIVE rules); a table or view gains columns at its end only (ALTER TABLE ADD COLUMN)."""
    kind = before.get("kind")
    if kind not in LOGS + TABLES or _changed(before, after) != ["columns"]:
        return None
    old, new = before.get("columns", []), after.get("columns", [])
    change = evolution(old, new)
    if change.reordered:
        return None
    if kind in TABLES:
        refused = None if change.appended_only else f"{change.describe()}: a table gains columns at its end only"
        return ColumnChange(change, "ADD COLUMN", refused)
    rule = (rule or DEFAULT_RULE).upper()
    refused = incompatibility([*(history or []), old], new, rule, before.get("value_format") or "json")
    return ColumnChange(change, rule, refused)


def _changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [k for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]
