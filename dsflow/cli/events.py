"""`dsflow events [--follow] [--object ADDRESS] [--since TIME] [--json]`: the environment's event log
(core/events.py), read from its state backend, or from a `dsflow serve` with --server (as the caller may see it)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from typing import Any

import click

from dsflow.cli import _load, console
from dsflow.cli.terminal import print_table
from dsflow.core.secrets import scrub

POLL_SECONDS = 1.0
OVERLAP_SECONDS = 30.0
"""Each look re-reads this far behind the newest event printed (not printing twice what it saw): an event is stamped
before it is appended, so one of another process can land a moment after a later-stamped one."""


@click.command()
@click.option("--follow", is_flag=True, help="keep printing new events until Ctrl-C")
@click.option("--object", "object_", metavar="ADDRESS", default=None,
              help="only this object's events (query.db.schema.name, db.schema.name or name)")
@click.option("--since", default=None, metavar="TIME", help="only events after TIME (ISO 8601, UTC unless it says)")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per event and line")
@click.option("--interval", type=float, default=POLL_SECONDS, show_default=True, help="with --follow: seconds "
              "between two looks at the log")
@click.pass_context
def events(ctx: click.Context, follow: bool, object_: str | None, since: str | None, as_json: bool,
           interval: float) -> None:
    """The event log: apply changes, query starts and stops, pauses, crashes, restarts, dead-letter bursts and
    counted gaps, oldest first."""
    read = _reader(ctx, object_)
    found = read(since)
    _show(found, as_json, table=not follow)
    if not follow:
        return
    stop = threading.Event()
    seen = {e["id"] for e in found}
    last = found[-1]["time"] if found else since
    try:
        while not stop.wait(interval):
            fresh = [e for e in read(_behind(last)) if e["id"] not in seen]
            if fresh:
                seen.update(e["id"] for e in fresh)
                last = fresh[-1]["time"]
                _show(fresh, as_json, table=False)
    except KeyboardInterrupt:
        pass


def _behind(time: str | None) -> str | None:
    from datetime import datetime, timedelta

    from dsflow.engine.eventlog import since_time

    if time is None:
        return None
    return (datetime.fromisoformat(since_time(time)) - timedelta(seconds=OVERLAP_SECONDS)).isoformat(
        timespec="microseconds")


def _reader(ctx: click.Context, object_: str | None) -> Callable[[str | None], list[dict[str, Any]]]:
    """since -> the events after it as JSON documents, from the server or the local state backend."""
    if ctx.meta.get("dsflow.server"):
        from dsflow.cli.server import _client

        client = _client(ctx)
        return lambda since: client.events(since, object_)
    from dsflow.engine import eventlog

    backend = _load(ctx).workspace.state_backend()
    return lambda since: [e.model_dump(mode="json") for e in eventlog.read(backend, since, object_)]


def _show(found: list[dict[str, Any]], as_json: bool, table: bool) -> None:
    if as_json:
        for e in found:
            click.echo(scrub(json.dumps(e, default=str)))
    elif table:
        if not found:
            console.print("No events.")
            return
        print_table(console, ("time", "kind", "object", "actor", "detail"),
                    [[e["time"], e["kind"], e["object"], e["actor"], scrub(detail_text(e["detail"]))] for e in found])
    else:
        for e in found:
            click.echo(scrub(line(e)))
    sys.stdout.flush()  # a follower's reader (a pipe, `| grep`) sees each event as it comes


def line(e: dict[str, Any]) -> str:
    return f"{e['time']} {e['kind']} {e['object']} by {e['actor']}" + (
        f": {detail_text(e['detail'])}" if e["detail"] else "")


def detail_text(detail: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v if isinstance(v, str) else json.dumps(v, default=str)}" for k, v in detail.items())
