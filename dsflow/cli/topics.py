"""`dsflow topic list|describe|create|delete|print|produce` on the stores that hold logs (logic in topics.py; the
help names the store kinds from the registry, core/stores.py)."""

from __future__ import annotations

import json
import re

import click

from dsflow.engine import operations, topics
from dsflow.core import stores
from dsflow.errors import DsflowError
from dsflow.cli.terminal import LazyConsole

console = LazyConsole()
STORE_HELP = "store to use (default: the relation's store, else the project's default store)"
LOGS_HELP = " and ".join(f"{stores.REGISTRY[t].title} {stores.REGISTRY[t].log_noun}s" for t in topics.STREAMING)
CREATE_HELP = "".join(f" (a {k.title} {k.log_noun} in a {k.type} store)"
                      for k in (stores.REGISTRY[t] for t in topics.STREAMING) if k.log_noun != "topic")
BOOTSTRAP_HELP = f"{stores.REGISTRY[topics.broker_type()].title} broker address, instead of a project store"


def _size_help(option: str, default: str) -> str:
    """'TITLE (default: ...)': the store kind whose topics take --OPTION."""
    found = topics.size_kind(option)
    return f"{found.title if found else option} (default: {default}, else 1)"


def _not_nan(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and value != value:  # NaN passes FloatRange's bounds
        raise click.BadParameter("not a number: give seconds (0 or more, inf to wait for ever)", ctx, param)
    return value


def _target(ctx: click.Context, name: str, store: str | None, bootstrap: str | None = None) -> topics.Target:
    if bootstrap:
        return topics.broker_target(bootstrap, name)
    return topics.resolve(operations.load(ctx.obj).project, name, store)


def _errors(target: topics.Target):
    """A store client's errors name the target's store (DSF-E255 for a secured store whose TLS or SASL failed)."""
    return topics.store_errors(target.store, target.store_type, target.settings)


@click.group(help=f"{LOGS_HELP}: list, describe, create, delete, produce and print.")
def topic() -> None:
    pass


@topic.command("list")
@click.option("--store", help=f"one store (default: every {topics.log_stores_text()} store)")
@click.pass_context
def topic_list(ctx: click.Context, store: str | None) -> None:
    """List the topics (streams) of the project's streaming stores, with the relations they back."""
    project = operations.load(ctx.obj).project
    stores = [topics.streaming_store(project, store)] if store else [
        s for s in project.stores if s.type in topics.STREAMING]
    for found in stores:
        backs = {r.topic: r.fqn for r in project.relations if r.store == found.name}
        with topics.store_errors(found.name, found.type, found.properties):
            names = topics.list_names(found)
        for name in names:
            click.echo(f"{found.name}\t{found.type}\t{name}\t{backs.get(name, '')}".rstrip())


@topic.command("describe")
@click.argument("name")
@click.option("--store", help=STORE_HELP)
@click.pass_context
def topic_describe(ctx: click.Context, name: str, store: str | None) -> None:
    """Describe topic NAME (a topic, stream or relation name) as JSON: partitions or shards."""
    target = _target(ctx, name, store)
    with _errors(target):
        info = topics.describe(target)
    if info is None:
        raise DsflowError("DSF-E767", f"no topic '{target.name}' in the {target.store_type} store '{target.store}'",
                          hint="see 'dsflow topic list'")
    click.echo(json.dumps(info))


@topic.command("create", help=f"Create topic NAME{CREATE_HELP}, waiting until it is ready.")
@click.argument("name")
@click.option("--store", help=STORE_HELP)
@click.option("--partitions", type=click.IntRange(1), help=_size_help("partitions", "the relation's"))
@click.option("--replicas", type=click.IntRange(1), help=_size_help("replicas", "the relation's"))
@click.option("--shards", type=click.IntRange(1), help=_size_help("shards", "the relation's topic.shards"))
@click.pass_context
def topic_create(ctx: click.Context, name: str, store: str | None, partitions: int | None, replicas: int | None,
                 shards: int | None) -> None:
    target = _target(ctx, name, store)
    with _errors(target):
        created = topics.create(target, partitions, replicas, shards)
    console.print(f"{'Created' if created else 'Already exists:'} {target.name} in {target.store}.")


@topic.command("delete")
@click.argument("name")
@click.option("--store", help=STORE_HELP)
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@click.pass_context
def topic_delete(ctx: click.Context, name: str, store: str | None, yes: bool) -> None:
    """Delete topic NAME and its records."""
    target = _target(ctx, name, store)
    if not yes:
        click.confirm(f"Delete {target.name} in {target.store} with all its records?", abort=True)
    with _errors(target):
        deleted = topics.delete(target)
    console.print(f"Deleted {target.name}." if deleted else f"No topic {target.name} in {target.store}.")


@topic.command("produce")
@click.argument("name")
@click.option("--file", "file", type=click.File("rb"), default="-", help="JSON lines in UTF-8 (default: stdin)")
@click.option("--key-field", help="take each record's key (partition key) from this JSON field")
@click.option("--store", help=STORE_HELP)
@click.option("--bootstrap", help=BOOTSTRAP_HELP)
@click.pass_context
def topic_produce(ctx: click.Context, name: str, file, key_field: str | None, store: str | None,
                  bootstrap: str | None) -> None:
    """Produce JSON lines to topic NAME (a topic, stream or relation name)."""
    target = _target(ctx, name, store, bootstrap)
    with _errors(target):
        count = topics.produce(target, file, key_field)
    console.print(f"Produced {count} record(s).")


@topic.command("print")
@click.argument("name")
@click.option("--from-beginning/--latest", default=True, show_default=True)
@click.option("--limit", type=click.IntRange(min=0), default=None, help="stop after this many records")
@click.option("--timeout", type=click.FloatRange(min=0), default=5.0, show_default=True, callback=_not_nan,
              help="stop after this many idle seconds")
@click.option("--raw", is_flag=True,
              help="print keys and values as stored, without decoding them with the relation's formats")
@click.option("--store", help=STORE_HELP)
@click.option("--bootstrap", help=BOOTSTRAP_HELP)
@click.pass_context
def topic_print(ctx: click.Context, name: str, from_beginning: bool, limit: int | None, timeout: float, raw: bool,
                store: str | None, bootstrap: str | None) -> None:
    """Print records of topic NAME as JSON lines (key, value, partition/shard, offset/sequence, timestamp)."""
    if ctx.meta.get("dsflow.server"):  # a relation's topic through `dsflow serve` (dsflow/cli/server.py)
        from dsflow.cli.server import remote_records

        for record in remote_records(ctx, name, from_beginning, limit, timeout, raw, store, bootstrap):
            click.echo(json.dumps(record, default=str))
        return
    target = _target(ctx, name, store, bootstrap)
    with _errors(target):
        for record in topics.records(target, from_beginning, limit, timeout, raw):
            click.echo(json.dumps(record, default=str))


@click.command("infer")
@click.argument("topic_name", metavar="TOPIC")
@click.option("--name", "relation", help="the stream's name in the statement (default: from the topic's name)")
@click.option("--sample", type=click.IntRange(1), default=100, show_default=True, help="records to read")
@click.option("--timeout", type=click.FloatRange(min=0), default=5.0, show_default=True, callback=_not_nan,
              help="stop reading after this many idle seconds")
@click.option("--store", help=STORE_HELP)
@click.option("--bootstrap", help=BOOTSTRAP_HELP)
@click.option("--subject", help="the schema registry subject of its values (default TOPIC-value, when the store has "
                                "a registry)")
@click.pass_context
def infer(ctx: click.Context, topic_name: str, relation: str | None, sample: int, timeout: float, store: str | None,
          bootstrap: str | None, subject: str | None) -> None:
    """Print a CREATE STREAM statement for TOPIC, to paste into the project's SQL: with the columns of its values'
    schema registry subject (Avro, Protobuf) when its store has a registry that holds one, else with columns, key
    and event time inferred from its first records (JSON values)."""
    from dsflow.core.inference import infer_stream

    if bootstrap:
        prefix, target = "", topics.broker_target(bootstrap, topic_name)
    else:  # one load: the prefix and the target both come from it
        project = operations.load(ctx.obj).project
        prefix, target = project.topic_prefix, topics.resolve(project, topic_name, store)
    with _errors(target):
        if topics.describe(target) is None:
            raise DsflowError("DSF-E767", f"no topic '{target.name}' in the {target.store_type} store "
                              f"'{target.store or target.bootstrap}'", hint="dsflow topic list shows the topics there")
        read = [(_text(r.get("key")), _text(r.get("value")))
                for r in topics.records(target, True, sample, timeout, raw=True)]
    unprefixed = target.name[len(prefix):] if prefix and target.name.startswith(prefix) else target.name
    name = relation or (re.sub(r"\W", "_", unprefixed).strip("_") or "inferred")
    inferred = _from_registry(target, name, unprefixed, subject, any(key is not None for key, _ in read)) \
        or infer_stream(name, target.name, read, unprefixed)
    if prefix and not target.name.startswith(prefix):
        click.echo(f"-- the environment's topic_prefix '{prefix}' is prepended to 'topic': this topic is outside it",
                   err=True)
    click.echo(inferred.text(), nl=False)


def _from_registry(target: topics.Target, name: str, unprefixed: str, subject: str | None, keyed: bool):
    """The statement from the registry subject of the topic's values, or None when its store has no registry or
    the registry has no such subject (and none was named: a named one that is missing is DSF-E123)."""
    from dsflow.core.inference import infer_from_schema
    from dsflow.formats.registry import latest_columns

    if not target.registry:
        if subject:
            raise DsflowError("DSF-E123", f"--subject '{subject}': the store '{target.store}' names no schema registry")
        return None
    wanted = subject or f"{target.name}-value"
    try:
        version, value_format, columns = latest_columns(target.registry, wanted)
    except DsflowError as err:
        if subject or "is not in the registry" not in err.message:
            raise
        return None
    key_format = None
    if keyed:
        try:
            key_format = latest_columns(target.registry, f"{target.name}-key")[1]
        except DsflowError:
            key_format = "string"
    return infer_from_schema(name, target.name, columns, value_format, wanted, version, key_format, unprefixed)


def _text(raw: object) -> str | None:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else None if raw is None else str(raw)
