"""A relation's physical object, in the pure core: its identity (a rename onto the same object is a move), its
name in words for the plan, which column changes leave it in place, and what a replay leaves in a sink."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsflow.core.resources import fingerprint

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
    """A relation's physical object in words: 'topic kafka_main/pageviews', 'delta table ...', ..."""
    kind, store = data.get("kind"), data.get("store", "")
    if kind in ("table", "materialized_view"):
        where = ", ".join(f"{k}={v}" for k, v in sorted((data.get("table_options") or {}).items()))
        return f"{store_types.get(store, '')} table {data.get('topic')}".strip() + (f" ({where})" if where else "")
    noun = "stream" if store_types.get(store) == "kinesis" else "topic"
    return f"{store_types.get(store, '')} {noun} {store}/{data.get('topic')}".strip()


def added_columns(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The columns a stream or changelog gains at its end when nothing else of it changed (every column is
    nullable, so earlier records read them as null and an Avro subject evolves compatibly: a field with a null
    default); [] for any other change, which replaces the relation."""
    if before.get("kind") not in ("stream", "changelog") or _changed(before, after) != ["columns"]:
        return []
    old, new = before.get("columns", []), after.get("columns", [])
    if len(new) <= len(old) or new[:len(old)] != old:
        return []
    return [name for name, _ in new[len(old):]]


def _changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [k for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]
