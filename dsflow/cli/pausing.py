"""`dsflow pause QUERY` and `dsflow resume QUERY` (engine/pausing.py): stop a query keeping its checkpoint and offsets,
and start it again on them."""

from __future__ import annotations

import json

import click

from dsflow.cli import _ask_runtime_to_look, _load, _query_address, _start_runtime, console


@click.command()
@click.argument("query")
@click.pass_context
def pause(ctx: click.Context, query: str) -> None:
    """Stop QUERY keeping its checkpoint and offsets; plan, status and the runtime supervisor leave it stopped
    until 'dsflow resume QUERY'."""
    from dsflow.engine.pausing import pause as pause_query

    loaded = _load(ctx)
    address = query if query.startswith("query.") else _query_address(loaded, query)
    entry = pause_query(loaded.project, loaded.workspace, address)
    offsets = entry.outputs.get("paused_offsets")
    console.print(f"Paused {address} on its checkpoint {entry.outputs.get('checkpoint')}"
                  + (f" (committed offsets {json.dumps(offsets)})" if offsets else "") + ".", markup=False)
    _ask_runtime_to_look(loaded, "pause")


@click.command()
@click.argument("query")
@click.option("--no-runtime", is_flag=True, help="do not start the runtime supervisor afterwards")
@click.pass_context
def resume(ctx: click.Context, query: str, no_runtime: bool) -> None:
    """Start the paused QUERY again on its checkpoint: it resumes from its last committed batch."""
    from dsflow.engine.pausing import resume as resume_query

    loaded = _load(ctx)
    address = query if query.startswith("query.") else _query_address(loaded, query)
    entry = resume_query(loaded.project, loaded.workspace, address)
    console.print(f"Resumed {address} (pid {entry.outputs.get('pid')}) on its checkpoint "
                  f"{entry.outputs.get('checkpoint')}.", markup=False)
    if not no_runtime:
        _start_runtime(ctx, loaded)
