"""`dsflow shadow start|diff|stop|promote QUERY` (engine/shadow.py): run a changed query beside the deployed one on
the same sources, compare their outputs, remove it, or hand the query over to it (apply, blue/green for a replay)."""

from __future__ import annotations

import json
import sys

import click

from dsflow.cli import EXIT_CHANGES, _load, catch_up_option, console
from dsflow.core.shadow import ShadowDiff, canonical

SHOWN = 20
"""Rows of each kind the text output lists (--json lists them all)."""


@click.group()
def shadow() -> None:
    """Shadow runs: a changed query run on production inputs into a topic of its own, compared with the live one."""


@shadow.command()
@click.argument("query")
@click.pass_context
def start(ctx: click.Context, query: str) -> None:
    """Run the project's changed version of the deployed QUERY (or of the query writing relation QUERY) into
    <topic>__shadow, from where the live version's output began."""
    from dsflow.engine import shadow as shadows

    loaded = _load(ctx.find_root())
    run = shadows.start(loaded.project, loaded.workspace, query)
    console.print(f"Shadow of {run.query} started (pid {run.outputs.get('pid')}): version {run.candidate_version} "
                  f"beside the live {run.live_version}, writing topic {run.topic}, checkpoint {run.checkpoint}. "
                  f"Compare with 'dsflow shadow diff {run.query}'.", markup=False)


@shadow.command()
@click.argument("query")
@click.option("--json", "as_json", is_flag=True, help="print the diff as JSON")
@click.option("--wait", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="seconds to wait for both versions to stop at the same source offsets")
@click.pass_context
def diff(ctx: click.Context, query: str, as_json: bool, wait: float) -> None:
    """Compare the shadow's output with the live version's over the input both have read: rows only in one side
    (a stream, with counts), keys whose values differ (a changelog), and counts; exit code 3 when they differ."""
    from dsflow.engine import shadow as shadows

    loaded = _load(ctx.find_root())
    found = shadows.diff(loaded.project, loaded.workspace, query, wait)
    if as_json:
        click.echo(json.dumps(found.model_dump(mode="json"), indent=2))
    else:
        console.print(diff_text(found), markup=False)
    if not found.empty:
        sys.exit(EXIT_CHANGES)


@shadow.command()
@click.argument("query")
@click.pass_context
def stop(ctx: click.Context, query: str) -> None:
    """Stop QUERY's shadow and delete its topic and checkpoint (they hold only the shadow's own rows)."""
    from dsflow.engine import shadow as shadows

    loaded = _load(ctx.find_root())
    run = shadows.stop(loaded.project, loaded.workspace, query)
    topic = f"topic {run.topic}" if run.created_topic else f"nothing of topic {run.topic} (dsflow did not create it)"
    console.print(f"Shadow of {run.query} stopped. Deleted: {topic}, checkpoint {run.checkpoint}, run folder "
                  f"{run.outputs.get('run_dir')}.", markup=False)


@shadow.command()
@click.argument("query")
@click.option("--auto-approve", is_flag=True, help="apply without asking")
@catch_up_option
@click.pass_context
def promote(ctx: click.Context, query: str, auto_approve: bool, catch_up: int) -> None:
    """Hand QUERY over to the version its shadow runs: the project's change to QUERY alone is planned and applied
    (a replay through blue/green: the new version built beside the deployed one, caught up, compared, its readers
    switched), then the shadow is stopped and removed."""
    from dsflow.cli import _apply, _warned
    from dsflow.engine import operations
    from dsflow.engine import shadow as shadows

    loaded = _load(ctx.find_root())
    address = shadows.promotable(loaded.project, loaded.workspace, query)
    the_plan = operations.plan(_warned(loaded), targets=frozenset({address}),
                               forced=operations.Forced(blue_green=True, catch_up_seconds=catch_up))
    _apply(loaded, the_plan, auto_approve)  # exits 1 on a failed change: the shadow is then kept
    run = shadows.stop(loaded.project, loaded.workspace, address)
    console.print(f"Shadow of {address} stopped: topic {run.topic} and its checkpoint deleted.", markup=False)


def diff_text(found: ShadowDiff) -> str:
    """The diff as the terminal shows it (pure)."""
    unit = "rows" if found.kind == "stream" else "keys"
    lines = [f"Shadow diff of {found.query} ({found.kind}) over source offsets {canonical(found.offsets)}",
             f"  live   {found.live_topic}: {found.live_records} records, {found.live_rows} {unit} "
             f"(batch {found.live_batch})",
             f"  shadow {found.shadow_topic}: {found.shadow_records} records, {found.shadow_rows} {unit} "
             f"(batch {found.shadow_batch})",
             f"  equal {unit}: {found.same}; only live: {len(found.only_live)}; only shadow: {len(found.only_shadow)}"
             + (f"; differ: {len(found.differ)}" if found.kind == "changelog" else "")]
    for title, rows in (("only live", found.only_live), ("only shadow", found.only_shadow)):
        lines += [f"  {title}: " + (f"key {r.key} " if r.key is not None else "") + canonical(r.value)
                  + (f" x{r.count}" if r.count != 1 else "") for r in rows[:SHOWN]]
        lines += [f"  ... and {len(rows) - SHOWN} more {title}"] if len(rows) > SHOWN else []
    lines += [f"  differ: key {d.key}: live {canonical(d.live)} shadow {canonical(d.shadow)}"
              for d in found.differ[:SHOWN]]
    lines += [f"  ... and {len(found.differ) - SHOWN} more that differ"] if len(found.differ) > SHOWN else []
    lines.append("No difference." if found.empty else "The versions differ.")
    return "\n".join(lines)
