"""Records of a Kinesis stream for the topic commands and tests: put JSON lines, read every shard, read dead letters.

A relation's value format is honoured through `Codec` (relation_codec): lines are JSON objects of the
relation's columns, encoded in its format when put, and values are decoded with it when read.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dsflow.adapters.kinesis.client import list_shards, new_client
from dsflow.adapters.kinesis.decoding import decode_records
from dsflow.adapters.kinesis.offsets import GET_LIMIT, LATEST, Record, _record, shard_iterator
from dsflow.adapters.kinesis.writing import partition_key, put_entries
from dsflow.formats.decoding import Decoding
from dsflow.formats.proto_schemas import schema_text
from dsflow.formats.serializers import value_serializer

RELIST_SECONDS = 10.0
"""How often a tail looks for shards added by a reshard (at once when one of its shards closes)."""


@dataclass(frozen=True)
class Codec:
    """A relation's value format for the topic commands: how its records are decoded and lines encoded."""

    decoding: Decoding
    schema: str | None = None
    """avro, protobuf: the value schema made from the relation's columns (registered when a line is put)."""
    subject: str | None = None


def relation_codec(relation: Any, registry: Mapping[str, str]) -> Codec | None:
    """The codec of a relation whose value format is not json (None for json: values are JSON text)."""
    if relation is None or relation.value_format == "json":
        return None
    columns = tuple((c.name, c.type) for c in relation.columns)
    decoding = Decoding(value_format=relation.value_format, columns=columns, registry=dict(registry))
    database, schema, name = relation.fqn.split(".")
    if relation.value_format == "avro":
        from dsflow.core.formats import avro_schema

        return Codec(decoding, avro_schema(name, f"{database}.{schema}", list(columns)), relation.value_subject)
    if relation.value_format == "protobuf":
        return Codec(decoding, schema_text(name, f"{database}.{schema}", list(columns)), relation.value_subject)
    return Codec(decoding)


def put_json_lines(settings: Mapping[str, str], stream: str, lines: Iterable[str],
                   key_field: str | None = None, codec: Codec | None = None) -> int:
    """Put each non-empty line (a JSON object) as a record; its partition key is `key_field`'s value if given.
    With a codec, the object's columns are encoded in the relation's value format instead."""
    encode = _encoder(stream, codec)

    def entries() -> Iterator[dict[str, Any]]:
        for line in lines:
            line = line.strip()
            if not line:
                continue
            key = None
            if key_field:
                value = json.loads(line).get(key_field)
                key = None if value is None else str(value)
            data = line.encode() if encode is None else encode(json.loads(line))
            yield {"Data": data, "PartitionKey": partition_key(key, data)}

    return put_entries(new_client(settings), stream, entries())


def _encoder(stream: str, codec: Codec | None) -> Callable[[dict], bytes] | None:
    """A JSON object -> the bytes of its columns in the codec's format (missing columns are null)."""
    if codec is None:
        return None
    serialize = value_serializer(codec.decoding.value_format, stream, codec.decoding.registry, codec.schema,
                                 codec.subject)
    assert serialize is not None  # a codec is of a value format other than json
    names = [n for n, _ in codec.decoding.columns]

    def encode(obj: dict) -> bytes:
        lowered = {str(k).lower(): v for k, v in obj.items()}
        row: dict[str, Any] = {n: obj[n] if n in obj else lowered.get(n.lower()) for n in names}
        if codec.decoding.value_format == "bytes" and isinstance(row[names[0]], str):
            row[names[0]] = row[names[0]].encode()
        return serialize([row])[0] or b""

    return encode


def decoded_value(record: Record, stream: str, shard: str, codec: Codec) -> dict[str, Any]:
    """{"value": the decoded columns} or {"error": why not, "value": the data as text}."""
    keep, values, bad = decode_records([record], stream, shard, codec.decoding)
    if bad:
        return {"value": record.data.decode("utf-8", "replace"), "error": f"not {codec.decoding.value_format}: "
                f"{bad[0][1]}"}
    return {"value": values.to_pylist()[0]}


def read_records(settings: Mapping[str, str], stream: str, from_beginning: bool = True, limit: int | None = None,
                 timeout: float = 5.0, codec: Codec | None = None, stop: Any = None,
                 on_start: Callable[[], None] | None = None) -> Iterator[dict[str, Any]]:
    """Records of every shard as dicts (key, value, shard, sequence, timestamp ms), until `limit` records or
    `timeout` seconds without a new one; with `stop` (a threading.Event: a tail), until it is set, calling
    `on_start()` once every shard is positioned and following the children of a shard that closes. Values are
    text, or with a codec the decoded columns (an `error` says why a value does not decode)."""
    client = new_client(settings)
    start = "trim" if from_beginning else LATEST
    iterators = {s["ShardId"]: shard_iterator(client, stream, s["ShardId"], start) for s in list_shards(client, stream)}
    known = set(iterators)
    if on_start is not None:
        on_start()
    count, idle_since, listed_at, closed = 0, time.monotonic(), time.monotonic(), False
    while _reading(stop, iterators, idle_since, timeout):
        got = False
        for shard_id in list(iterators):
            response = client.get_records(ShardIterator=iterators[shard_id], Limit=GET_LIMIT)
            for raw in response["Records"]:
                record = _record(raw)
                value = ({"value": record.data.decode("utf-8", "replace")} if codec is None
                         else decoded_value(record, stream, shard_id, codec))
                yield {"key": record.key, **value, "shard": shard_id, "sequence": record.sequence,
                       "timestamp": record.arrival_ms}
                count += 1
                got = True
                if limit is not None and count >= limit:
                    return
            if response.get("NextShardIterator") is None:
                del iterators[shard_id]
                closed = True
            else:
                iterators[shard_id] = response["NextShardIterator"]
        if stop is not None and (closed or time.monotonic() - listed_at > RELIST_SECONDS):
            listed_at, closed = time.monotonic(), False  # a closed shard's children hold what follows it
            for shard in list_shards(client, stream):
                if shard["ShardId"] not in known:
                    known.add(shard["ShardId"])
                    iterators[shard["ShardId"]] = shard_iterator(client, stream, shard["ShardId"], "trim")
        if got:
            idle_since = time.monotonic()
        elif stop is not None:
            stop.wait(0.2)
        else:
            time.sleep(0.2)


def _reading(stop: Any, iterators: dict[str, str], idle_since: float, timeout: float) -> bool:
    if stop is not None:
        return not stop.is_set()
    return bool(iterators) and time.monotonic() - idle_since < timeout


def read_dead_letters(settings: Mapping[str, str], stream: str, timeout: float = 1.0) -> list[dict[str, Any]]:
    """The envelopes in a dead-letter stream (decoding.DeadLetterStream), with `data` decoded back to bytes
    (tests, support)."""
    out = []
    for record in read_records(settings, stream, timeout=timeout):
        letter = json.loads(record["value"])
        out.append({**letter, "data": base64.b64decode(letter["data_base64"])})
    return out
