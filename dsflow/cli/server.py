"""`dsflow serve` (the REST API, GraphQL and web page: dsflow/server) and its identity commands `dsflow users` and
`dsflow tokens` (the SQLite store beside the state: dsflow/server/identity.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import cast

import click

from dsflow.engine import operations


def _store(ctx: click.Context):
    from dsflow.server.identity import IdentityStore, identity_path

    return IdentityStore(identity_path(operations.load(ctx.obj).workspace))


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--access-log", is_flag=True, help="log every request (paths only; tokens travel in headers)")
@click.option("--print-openapi", is_flag=True, help="print the OpenAPI document of the REST API and exit")
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, access_log: bool, print_openapi: bool) -> None:
    """Serve the project environment: REST API under /api/v1, GraphQL at /graphql, the web page at /."""
    from dsflow.server.app import create_app, openapi_document

    if print_openapi:
        click.echo(json.dumps(openapi_document(), indent=2))
        return
    import uvicorn

    app = create_app(ctx.obj)
    server = app.state.server
    server.identity  # noqa: B018 - load the project and open the identity store before listening
    if not server.identity.users():
        click.echo("No users yet: add one with 'dsflow users add NAME' (every request but /api/v1/health needs a "
                   "token).", err=True)
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(f"Listening on {host}: tokens and passwords travel in clear over HTTP; put a TLS proxy in front.",
                   err=True)
    uvicorn.run(app, host=host, port=port, access_log=access_log, log_level="info")


@click.group()
def users() -> None:
    """Users of `dsflow serve` (their roles come from the project's bindings, as deployed)."""


@users.command("add")
@click.argument("name")
@click.option("--password-env", metavar="VAR", help="read the password from environment variable VAR "
                                                     "(default: the first line of stdin)")
@click.pass_context
def users_add(ctx: click.Context, name: str, password_env: str | None) -> None:
    """Add user NAME with a password (stored as an argon2 hash)."""
    if password_env:
        password = os.environ.get(password_env, "")
    elif sys.stdin.isatty():
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    _store(ctx).add_user(name, password)
    click.echo(f"Added user {name}.")


@users.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def users_list(ctx: click.Context, as_json: bool) -> None:
    """List the users."""
    found = _store(ctx).users()
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    for user in found:
        click.echo(f"{user['name']}\t{user['created']}")


@users.command("remove")
@click.argument("name")
@click.pass_context
def users_remove(ctx: click.Context, name: str) -> None:
    """Remove user NAME and every token it holds."""
    _store(ctx).remove_user(name)
    click.echo(f"Removed user {name}.")


@click.group()
def tokens() -> None:
    """Service tokens of `dsflow serve` users (`Authorization: Bearer <token>`; DSFLOW_TOKEN for --server)."""


@tokens.command("create")
@click.argument("user")
@click.option("--name", default="", help="what the token is for")
@click.pass_context
def tokens_create(ctx: click.Context, user: str, name: str) -> None:
    """Create a token for USER and print it: it is shown this once (only its hash is kept)."""
    token, info = _store(ctx).create_token(user, name)
    click.echo(token)
    click.echo(f"Token {info.id} for {user}: store it now, it is not shown again.", err=True)


@tokens.command("list")
@click.option("--user", help="only this user's tokens")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def tokens_list(ctx: click.Context, user: str | None, as_json: bool) -> None:
    """List service tokens (ids, never the tokens themselves)."""
    found = [vars(t) for t in _store(ctx).tokens(user)]
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    for t in found:
        state = "revoked" if t["revoked"] else "active"
        click.echo(f"{t['id']}\t{t['user']}\t{t['name'] or '-'}\t{state}\tcreated {t['created']}\t"
                   f"last used {t['last_used'] or 'never'}")


@tokens.command("revoke")
@click.argument("token_id")
@click.pass_context
def tokens_revoke(ctx: click.Context, token_id: str) -> None:
    """Revoke token TOKEN_ID (its id from 'dsflow tokens list'): it stops working at once."""
    _store(ctx).revoke(token_id)
    click.echo(f"Revoked token {token_id}.")


def write_openapi(path: Path) -> None:
    """Write the OpenAPI document (docs/openapi.json)."""
    from dsflow.server.app import openapi_document

    path.write_text(json.dumps(openapi_document(), indent=2) + "\n")


__all__ = ["serve", "users", "tokens", "write_openapi"]


# --server: the commands that can work through a `dsflow serve` (dsflow/server/client.py)

def server_url(ctx: click.Context) -> str | None:
    """The --server URL (or DSFLOW_SERVER) given to `dsflow`, None to work locally."""
    return ctx.find_root().meta.get("dsflow.server")


def _client(ctx: click.Context):
    from dsflow.server.client import Client

    return Client.from_env(cast(str, server_url(ctx)))  # the remote commands run only with --server


def _unsupported(what: str, given: bool) -> None:
    if given:
        raise click.UsageError(f"{what} does not work through --server")


def remote_plan(ctx: click.Context, destroy: bool, refresh: bool, refresh_only: bool, targets: tuple[str, ...],
                excludes: tuple[str, ...] = ()):
    """The server's plan of its checkout; the changes the caller may not apply are listed on stderr."""
    from dsflow.core.plan import Plan

    _unsupported("--refresh-only", refresh_only)
    _unsupported("--target", bool(targets))
    _unsupported("--exclude", bool(excludes))
    answer = _client(ctx).plan(destroy=destroy, refresh=refresh)
    for item in answer.get("authorization", []):
        if not item["allowed"]:
            click.echo(f"Not allowed to you: {item['action']} {item['address']}: {item['message']}", err=True)
    return Plan.model_validate(answer["plan"])


def remote_apply(ctx: click.Context, planfile: Path | None, allow_data_loss: bool, allow_destroy: tuple[str, ...],
                 no_runtime: bool, refresh_only: bool, targets: tuple[str, ...],
                 excludes: tuple[str, ...] = ()) -> None:
    """Apply a saved plan file on the server; exit 1 if a change failed."""
    if planfile is None:
        raise click.UsageError("through --server, apply takes a saved plan: dsflow --server URL plan --out FILE, "
                               "then dsflow --server URL apply FILE")
    _unsupported("--refresh-only", refresh_only)
    _unsupported("--target", bool(targets))
    _unsupported("--exclude", bool(excludes))
    plan = json.loads(planfile.read_text())
    result = _client(ctx).apply(plan, allow_data_loss, allow_destroy, start_runtime=not no_runtime)
    for change in result["done"]:
        click.echo(f"  ✓ {change['action']} {change['address']}")
    if result["failed"]:
        failed = result["failed"]
        click.echo(f"\nError while applying {failed['address']}: {failed['error']}", err=True)
        if result["skipped"]:
            click.echo("Not applied: " + ", ".join(c["address"] for c in result["skipped"]), err=True)
        sys.exit(1)
    click.echo(f"\nApply complete: {len(result['done'])} change(s).")


def remote_status(ctx: click.Context) -> list[dict]:
    return _client(ctx).status()


def remote_query(ctx: click.Context, sql: str, follow: bool, position: str,
                 print_rows) -> None:
    """`dsflow query` on the server: a view snapshot, or a followed query until Ctrl-C."""
    client = _client(ctx)
    if not follow:
        columns, rows = client.view_query(sql)
        print_rows(columns, rows, header=True)
        return
    import threading

    printed = {"header": False}

    def on_rows(columns: list[str], rows: list[tuple]) -> None:
        print_rows(columns, rows, header=not printed["header"], stream=True)
        printed["header"] = True

    click.echo(f"Following on {server_url(ctx)}; press Ctrl-C to stop.", err=True)
    try:
        client.follow(sql, position, on_rows, threading.Event())
    except KeyboardInterrupt:  # the connection closes: the server stops the query and removes its checkpoint
        pass
    click.echo("Stopped.", err=True)


def remote_records(ctx: click.Context, name: str, from_beginning: bool, limit: int | None, timeout: float,
                   raw: bool, store: str | None, bootstrap: str | None) -> list[dict]:
    """`dsflow topic print` of a relation's topic through the server (at most 1,000 records, 30 s idle)."""
    _unsupported("--raw", raw)
    _unsupported("--store", bool(store))
    _unsupported("--bootstrap", bool(bootstrap))
    return _client(ctx).records(name, from_beginning, limit, timeout)
