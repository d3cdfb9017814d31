"""The event log's model: what happened to which object, when, and who did it (pure data, no I/O).

Every apply change, query start and stop, crash, restart, dead-letter burst and counted gap is an `Event`, appended to
the environment's state backend beside its state (adapters/state) and never rewritten. `selected` filters them as
`dsflow events`, the API and `sys.events` do; `system_tables` gives the rows of `dsflow query`'s read-only system
tables sys.events, sys.queries and sys.relations.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dsflow.core.address import Address, Kind
from dsflow.core.state import State

EventKind = Literal["apply", "apply_failed", "start", "stop", "crash", "restart", "restart_failed", "dead_letters",
                    "gap", "pause", "resume", "expectation_failed"]
KINDS: tuple[str, ...] = EventKind.__args__  # type: ignore[attr-defined]


class Event(BaseModel):
    """One thing that happened to one object of an environment."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    time: str = Field(description="when, UTC, ISO 8601 with microseconds (sorts as text)")
    id: str = Field(description="unique: tells apart events of the same microsecond")
    environment: str = ""
    object: str = Field(description="the object's address (query.db.schema.name, relation.…, topic.…)")
    kind: EventKind
    actor: str = Field(description="who: the OS user (user@host) of a command, the API user (api:NAME), or "
                       "'supervisor' (the runtime supervisor)")
    detail: dict[str, Any] = Field(default_factory=dict, description="what: the action, error, offsets, counts")

    @property
    def key(self) -> tuple[str, str]:
        return self.time, self.id


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def event(object: str, kind: EventKind, actor: str, environment: str = "", **detail: Any) -> Event:
    """A new event happening now."""
    return Event(time=now(), id=uuid.uuid4().hex, environment=environment, object=object, kind=kind, actor=actor,
                 detail={k: v for k, v in detail.items() if v is not None})


def normalized_time(text: str) -> str:
    """`since` as the log's text form (UTC ISO with microseconds): a date, a time with or without an offset."""
    parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc).isoformat(timespec="microseconds")


def matches(found: str, wanted: str) -> bool:
    """Whether an event's object is the one asked for: its address, or the address without its kind or database
    and schema (`query.db.s.name`, `db.s.name`, `name`)."""
    return found == wanted or found.endswith("." + wanted)


def selected(events: Iterable[Event], since: str | None = None, object: str | None = None,
             visible: Any = None) -> list[Event]:
    """Events after `since` (a time, exclusive) of `object`, that `visible(address)` lets through, oldest first."""
    after = normalized_time(since) if since else None
    found = [e for e in events if (after is None or e.time > after) and (not object or matches(e.object, object))
             and (visible is None or visible(e.object))]
    return sorted(found, key=lambda e: e.key)


SYS_COLUMNS: dict[str, tuple[str, ...]] = {
    "events": ("time", "object", "kind", "actor", "detail", "environment", "id"),
    "queries": ("address", "name", "version", "category", "started_at", "checkpoint", "pid", "paused", "sink",
                "sources", "statement", "restarts"),
    "relations": ("address", "name", "kind", "store", "topic", "value_format", "partitions", "columns"),
}
"""The system tables and their columns, as `dsflow query` shows them (docs/cli.md#sys-tables)."""


def system_tables(state: State, events: list[Event], visible: Any = None
                  ) -> dict[str, tuple[tuple[str, ...], list[tuple]]]:
    """name -> (columns, rows) of each system table, from the deployed state and the event log; only the objects
    `visible(address)` lets through when given."""
    if visible is not None:
        events = [e for e in events if visible(e.object)]
        state = state.model_copy(update={"resources": {k: v for k, v in state.resources.items() if visible(k)}})
    restarts: dict[str, int] = {}
    for e in events:
        if e.kind == "restart":
            restarts[e.object] = restarts.get(e.object, 0) + 1
    return {"events": (SYS_COLUMNS["events"], [(e.time, e.object, e.kind, e.actor, json.dumps(e.detail),
                                                e.environment, e.id) for e in events]),
            "queries": (SYS_COLUMNS["queries"], _queries(state, restarts)),
            "relations": (SYS_COLUMNS["relations"], _relations(state))}


def _queries(state: State, restarts: dict[str, int]) -> list[tuple]:
    rows = []
    for key, r in sorted(state.resources.items()):
        if Address.parse(key).kind is not Kind.QUERY:
            continue
        history = state.history(key)
        last = history[-1] if history else None
        rows.append((key, Address.parse(key).name, r.outputs.get("version") or r.data_hash,
                     last.category if last else None, last.started_at if last else None,
                     r.outputs.get("checkpoint"), r.outputs.get("pid"), bool(r.outputs.get("paused")),
                     r.data.get("sink"), json.dumps([s[0] for s in r.data.get("sources", [])]),
                     r.data.get("statement"), restarts.get(key, 0)))
    return rows


def _relations(state: State) -> list[tuple]:
    return [(key, Address.parse(key).name, r.data.get("kind"), r.data.get("store"),
             r.outputs.get("topic") or r.data.get("topic"), r.data.get("value_format"), r.data.get("partitions"),
             json.dumps(r.data.get("columns", [])))
            for key, r in sorted(state.resources.items()) if Address.parse(key).kind is Kind.RELATION]
