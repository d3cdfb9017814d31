"""Writing and reading the environment's event log (core/events.py) through its state backend.

Recording is best effort: a log that cannot be written (the backend unreachable for a moment) never fails the apply or
restart it describes; the failure is said on stderr.
"""

from __future__ import annotations

import getpass
import socket
import sys
from typing import Any

from dsflow.adapters.state import StateBackend
from dsflow.core.events import Event, EventKind, event, selected
from dsflow.errors import DsflowError

SUPERVISOR = "supervisor"


def local_actor() -> str:
    """The OS user of this command, as user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def api_actor(user: str) -> str:
    return f"api:{user}"


def record(backend: StateBackend, events: list[Event]) -> None:
    """Append `events`; a failure is reported on stderr, never raised."""
    if not events:
        return
    try:
        backend.append_events(events)
    except Exception as err:  # noqa: BLE001 - the log must never stop what it records
        print(f"dsflow: could not record {len(events)} event(s) in the event log: {err}", file=sys.stderr)


def emit(backend: StateBackend, environment: str, object: str, kind: EventKind, actor: str, **detail: Any) -> None:
    record(backend, [event(object, kind, actor, environment, **detail)])


def read(backend: StateBackend, since: str | None = None, object: str | None = None, visible: Any = None
         ) -> list[Event]:
    """The log after `since` about `object`, only what `visible(address)` lets through, oldest first; DSF-E724 if
    `since` is not a time."""
    return selected(backend.read_events(since_time(since) if since else None), None, object, visible)


def since_time(text: str) -> str:
    from dsflow.core.events import normalized_time

    try:
        return normalized_time(text)
    except ValueError:
        raise DsflowError("DSF-E724", f"'{text}' is not a time", hint="give an ISO 8601 time such as "
                          "2026-11-30T09:00:00Z or 2026-11-30 (UTC unless it names an offset)") from None
