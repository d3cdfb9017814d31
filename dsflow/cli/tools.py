"""CLI sub-commands around the pipeline: the dev broker, data generation and scaffolding (topics: cli/topics.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from dsflow.engine import operations, topics
from dsflow.errors import DsflowError
from dsflow.cli.terminal import LazyConsole

console = LazyConsole()
TEMPLATES = Path(__file__).parents[1] / "templates"  # a link to the repository's templates/, copied into wheels


def _dev_dir(options: operations.Options) -> Path:
    return options.project_dir / ".dsflow" / "dev"


def _dev_broker():
    """The embedded broker of the store kind a bare broker address is of (the `commands` facet's dev_broker)."""
    return topics.log_commands(topics.broker_type()).dev_broker()


def _dev_registry():
    """The development schema registry beside that broker (the `commands` facet's dev_registry)."""
    return topics.log_commands(topics.broker_type()).dev_registry()


@click.group()
def dev() -> None:
    """The development broker on 127.0.0.1 (tansu by default: in memory, no JVM; docs/cli.md lists the kinds)."""


@dev.command("up")
@click.option("--port", default=9092, show_default=True)
@click.option("--broker", "kind", default="tansu", show_default=True, metavar="KIND",
              help="the kind of broker: tansu (starts in a second, no JVM) or the JVM broker users run, with SASL, "
                   "TLS and ACLs (docs/cli.md, dev)")
@click.option("--registry", is_flag=True, help="also start a Confluent-compatible schema registry (in memory) on "
                                               "127.0.0.1:--registry-port")
@click.option("--registry-port", default=8081, show_default=True)
@click.pass_context
def dev_up(ctx: click.Context, port: int, kind: str, registry: bool, registry_port: int) -> None:
    """Start the dev broker (and with --registry a schema registry) and wait until it answers."""
    devbroker = _dev_broker()
    if kind not in devbroker.KINDS:
        raise click.BadParameter(f"'{kind}' is not one of {', '.join(devbroker.KINDS)}", param_hint="'--broker'")
    info = devbroker.start(_dev_dir(ctx.obj), port=port, kind=kind)
    console.print(f"Broker running at {info.bootstrap} (pid {info.pid}); log: {info.log}")
    for line in devbroker.listener_lines(info):
        console.print(line, markup=False, highlight=False)
    if registry:
        found = _dev_registry().start(_dev_dir(ctx.obj), port=registry_port)
        console.print(f"Schema registry running at {found.url} (pid {found.pid}); log: {found.log}")


@dev.command("down")
@click.pass_context
def dev_down(ctx: click.Context) -> None:
    """Stop the dev broker started by 'dsflow dev up'."""
    devbroker = _dev_broker()
    stopped = devbroker.stop(_dev_dir(ctx.obj))
    console.print("Broker stopped." if stopped else "No dev broker was running.")
    if _dev_registry().stop(_dev_dir(ctx.obj)):
        console.print("Schema registry stopped.")


@dev.command("status")
@click.pass_context
def dev_status(ctx: click.Context) -> None:
    """Say whether the dev broker runs."""
    devbroker = _dev_broker()
    info = devbroker.read(_dev_dir(ctx.obj))
    if info is None:
        console.print("No dev broker is running.")
    else:
        console.print(f"Broker ({info.kind}) running at {info.bootstrap} (pid {info.pid})")
        for line in devbroker.listener_lines(info):
            console.print(line, markup=False, highlight=False)
    found = _dev_registry().read(_dev_dir(ctx.obj))
    if found is not None:
        console.print(f"Schema registry running at {found.url} (pid {found.pid})")


@click.command()
@click.argument("relation")
@click.option("--generator", default=None, help="pageviews, users or columns (default: columns)")
@click.option("--rate", type=float, default=10.0, show_default=True, help="records/s; 0 = as fast as possible")
@click.option("--count", type=int, default=None, help="records to produce (default: until Ctrl-C)")
@click.option("--seed", type=int, default=0, show_default=True)
@click.pass_context
def datagen(ctx: click.Context, relation: str, generator: str | None, rate: float, count: int | None,
            seed: int) -> None:
    """Feed RELATION's topic with generated records."""
    from dsflow.datagen import DatagenSpec, run

    project = operations.load(ctx.obj).project
    found = next((r for r in project.relations if r.fqn == relation or r.fqn.endswith("." + relation)), None)
    if found is None:
        raise DsflowError("DSF-E040", f"unknown relation '{relation}'", hint="see 'dsflow graph'")
    store = project.store(found.store)
    assert store is not None  # a loaded project's relations name its stores
    spec = DatagenSpec(topic=found.topic, generator=generator or "columns", rate=rate, count=count, seed=seed,
                       key_columns=found.primary_key, columns=tuple((c.name, c.type) for c in found.columns))
    try:
        with topics.store_errors(store.name, store.type, store.properties):
            produced = run(store.bootstrap_servers, spec, config=dict(store.properties))
    except KeyboardInterrupt:
        sys.exit(130)
    console.print(f"Produced {produced} record(s) to {found.topic}.")


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--name", default=None, help="project name (default: the folder's name)")
def init(directory: Path, name: str | None) -> None:
    """Scaffold a new project in DIRECTORY from templates/."""
    if (directory / "dsflow.yml").exists():
        raise DsflowError("DSF-E015", f"{directory / 'dsflow.yml'} already exists", hint="choose an empty folder")
    if not TEMPLATES.is_dir():
        raise DsflowError("DSF-E016", f"templates not found at {TEMPLATES}", hint="install dsflow from its source tree")
    shutil.copytree(TEMPLATES, directory, dirs_exist_ok=True)
    config = directory / "dsflow.yml"
    config.write_text(config.read_text().replace("__PROJECT_NAME__", name or directory.resolve().name))
    _ignore_run_folder(directory)
    console.print(f"Created a dsflow project in {directory}. Next: dsflow -C {directory} validate")


IGNORED = ".dsflow/"
"""The project's run folder (state, checkpoints, logs, the load cache): never committed."""


def _ignore_run_folder(directory: Path) -> None:
    """A .gitignore naming the run folder, or that line added to the folder's own .gitignore."""
    path = directory / ".gitignore"
    text = path.read_text() if path.exists() else ""
    if IGNORED in text.split("\n") or ".dsflow" in text.split("\n"):
        return
    prefix = "" if not text or text.endswith("\n") else "\n"
    path.write_text(f"{text}{prefix}# dsflow's run folder: state, checkpoints, logs and caches\n{IGNORED}\n")
