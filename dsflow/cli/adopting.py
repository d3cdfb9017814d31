"""`dsflow import ADDRESS ID` (core/imports.py): take an existing log (or table) a declared relation names, or a
running query, into the state as it is, as an `import:` entry would; the plan is targeted at ADDRESS (and what it
needs)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from dsflow.cli import _apply, _load
from dsflow.core.imports import can_import, names_object, not_importable
from dsflow.engine import operations
from dsflow.errors import DsflowError


@click.command("import")
@click.argument("address")
@click.argument("id_", metavar="ID")
@click.option("--auto-approve", is_flag=True, help="do not ask for confirmation")
@click.pass_context
def import_(ctx: click.Context, address: str, id_: str, auto_approve: bool) -> None:
    """Adopt the existing log (a topic, a stream) or table ID ([DATABASE.]SCHEMA.TABLE, in a store kind that imports
    tables) that the declared stream, changelog or table ADDRESS names, or the query ADDRESS (query.NAME) that runs
    from the run folder ID (or on the checkpoint ID) in a driver of its own or a shared application: the plan shows
    it imported, then what its declaration changes in it; apply records it (dsflow never deletes it)."""
    loaded = _load(ctx)
    if address.startswith("query."):
        key, run_dir = _running_query(loaded, address.removeprefix("query."), id_)
        _apply(loaded, operations.plan(loaded, targets=frozenset({key}), imports={key: run_dir}), auto_approve)
        return
    name = address.removeprefix("relation.")
    found = [r for r in loaded.project.relations if r.fqn == name or r.fqn.endswith(f".{name}")]
    if len(found) != 1 or not can_import(found[0], loaded.project.store(found[0].store)):
        message, hint = not_importable(address)
        raise DsflowError("DSF-E866", message, hint=hint)
    relation = found[0]
    if not names_object(relation, id_):
        noun = "table" if relation.kind == "table" else "log"
        raise DsflowError("DSF-E867", f"import: '{id_}' is not the {noun} relation.{relation.fqn} names "
                          f"('{relation.topic}')", hint=f"name '{id_}' in its declaration, or import "
                                                        f"'{relation.topic}'")
    key = f"relation.{relation.fqn}"
    _apply(loaded, operations.plan(loaded, targets=frozenset({key}), imports={key: relation.topic}), auto_approve)


def _running_query(loaded: operations.Loaded, name: str, given: str) -> tuple[str, str]:
    """(the query's address, its run folder) from a run folder (it holds spec.json) or the checkpoint the query of its
    run folder in this project's workspace runs on (in a driver of its own or a shared application)."""
    found = [q for q in loaded.project.queries if q.fqn == name or q.fqn.endswith(f".{name}")]
    if len(found) != 1:
        raise DsflowError("DSF-E866", f"import: 'query.{name}' is not a query declared in the project",
                          hint="declare it, then import the driver that runs it")
    query = found[0]
    path = Path(given).resolve()
    if (path / "spec.json").is_file():
        return f"query.{query.fqn}", str(path)
    run_dir = loaded.workspace.query_dir(query.fqn)
    spec = run_dir / "spec.json"
    if spec.is_file() and Path(json.loads(spec.read_text()).get("checkpoint", "")).resolve() == path:
        return f"query.{query.fqn}", str(run_dir)
    raise DsflowError("DSF-E867", f"import: '{given}' is neither a query's run folder (with its spec.json) nor the "
                      f"checkpoint of the driver in {run_dir}", hint="name the run folder of "
                      f"query.{query.fqn} (.dsflow/run/queries/<name>), or its checkpoint")
