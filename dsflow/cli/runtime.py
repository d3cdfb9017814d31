"""`dsflow runtime up|down|status`: the environment's supervisor that keeps deployed queries up (dsflow/runtime)."""

from __future__ import annotations

import json
import time

import click

from dsflow.engine import operations
from dsflow.cli.terminal import LazyConsole

console = LazyConsole()


@click.group()
def runtime() -> None:
    """The runtime supervisor: restarts dead queries and generators from their checkpoints, serves metrics."""


@runtime.command("up")
@click.option("--port", default=0, show_default=True, help="the metrics port on 127.0.0.1 (0: any free port)")
@click.option("--foreground", is_flag=True,
              help="run it in this process until SIGTERM, its log on stdout (a systemd unit, a container)")
@click.pass_context
def runtime_up(ctx: click.Context, port: int, foreground: bool) -> None:
    """Start the supervisor in the background (nothing happens if it runs already), or with --foreground
    become it."""
    from dsflow.runtime.control import run_in_foreground, up

    options: operations.Options = ctx.find_root().obj
    if foreground:
        run_in_foreground(operations.load(options), options, port=port)
        return
    found, started = up(operations.load(options), options, port=port)
    verb = "started" if started else "already running"
    console.print(f"Runtime supervisor {verb} (pid {found['pid']}); metrics on "
                  f"http://127.0.0.1:{found['port']}/metrics")


@runtime.command("down")
@click.pass_context
def runtime_down(ctx: click.Context) -> None:
    """Stop the supervisor; the queries keep running, but nothing restarts them."""
    from dsflow.runtime.control import down

    from dsflow.cli import load_what_runs

    pid = down(load_what_runs(ctx))
    console.print(f"Runtime supervisor stopped (pid {pid})." if pid else "No runtime supervisor was running.")


@runtime.command("status")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def runtime_status(ctx: click.Context, as_json: bool) -> None:
    """Whether the supervisor runs, its PID, metrics address and log."""
    from dsflow.runtime.control import info, standby_info
    from dsflow.runtime.supervisor import LOG_FILE

    from dsflow.cli import load_what_runs

    loaded = load_what_runs(ctx)
    found = info(loaded)
    report = {"running": found is not None, "log": str(loaded.workspace.run_dir / LOG_FILE),
              **({"pid": found["pid"], "metrics": f"http://127.0.0.1:{found['port']}/metrics",
                  "uptime_seconds": round(time.time() - found["started_at"], 1), **_asked(loaded)} if found else {}),
              **standby_info(loaded)}
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    if found:
        asked = report.get("last_asked")
        console.print(f"running (pid {report['pid']}, up {report['uptime_seconds']:.0f} s, "
                      f"{report.get('looks', '?')} looks" + (f", the last asked by {asked['by']}" if asked else "")
                      + f"); metrics {report['metrics']}; log {report['log']}", markup=False)
        if report.get("endpoint_error"):
            console.print(f"endpoint: {report['endpoint_error']}", markup=False)
    else:
        console.print(f"not running; log {report['log']}")
    console.print(_standby_line(report), markup=False)


def _asked(loaded: operations.Loaded) -> dict:
    """The supervisor's own answer (GET /v1/status with its token): looks done, the last look asked and by whom."""
    from dsflow.errors import DsflowError
    from dsflow.runtime.control import ask

    try:
        answer = ask(loaded, "/v1/status")
    except DsflowError as err:
        return {"endpoint_error": f"{err.code}: {err.message}"}
    return {"looks": answer.get("looks"), "last_asked": answer.get("last_asked")}


def _standby_line(report: dict) -> str:
    waiting, kept = report["standby"], report.get("standby_keeper") or {}
    if waiting is None:
        why = kept.get("last_error") or kept.get("note") or "none waiting"
        return "standby driver: " + (why if report["enabled"] else "off (runtime.standby)")
    memory = f", {waiting['rss_bytes'] / 2**20:.0f} MiB RSS" if waiting.get("rss_bytes") else ""
    return f"standby driver: {waiting['state']} (pid {waiting['pid']}, {waiting['master']}{memory})"
