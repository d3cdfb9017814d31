"""`dsflow describe QUERY` (engine/describing.py): a deployed query's SQL and version, its sources' committed offsets,
its watermark and its state size."""

from __future__ import annotations

import json

import click

from dsflow.cli import _check_query_known, _load, _query_address


@click.command()
@click.argument("query")
@click.option("--json", "as_json", is_flag=True)
@click.option("--state-sample", "sample", type=click.IntRange(min=1), default=None, metavar="N",
              help="also read its state from the checkpoint (Spark's state data source): rows per stateful operator "
                   "and N of them, key and value")
@click.pass_context
def describe(ctx: click.Context, query: str, as_json: bool, sample: int | None) -> None:
    """QUERY as it runs: its SQL and version, the offsets its last committed batch ended at per source, its watermark
    and the rows and bytes of its state (from its checkpoint and its driver's status file)."""
    from dsflow.engine.describing import describe as describe_query
    from dsflow.engine.describing import describe_text

    loaded = _load(ctx)
    state = loaded.workspace.state_backend().read()
    address = query if query.startswith("query.") else _query_address(loaded, query)
    _check_query_known(address, query, loaded, state)
    described = describe_query(state, address, sample or 0)
    click.echo(json.dumps(described, indent=2, default=str) if as_json else describe_text(described))
