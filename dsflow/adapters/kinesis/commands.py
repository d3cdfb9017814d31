"""Kinesis's stream commands (the `commands` facet, core/stores.py): `dsflow topic ...` on a Kinesis stream, the
server's tail and the dead letters of `dsflow status`.

A target is dsflow/engine/topics.py's `Target` (store_type, name, settings, relation, store, registry).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

RECORD_BYTES = 1_048_576
"""The largest Kinesis record: data and partition key together (1 MiB)."""


class KinesisCommands:
    size_options = ("shards",)
    """The sizes `dsflow topic create` takes for a stream."""
    size_hint = "a Kinesis stream is sized with --shards N"

    def errors(self, store: str, settings: Any) -> AbstractContextManager:
        return nullcontext()  # the client's errors name the store already

    def list_names(self, store: Any) -> list[str]:
        from dsflow.adapters.kinesis.admin import list_streams

        return list_streams(dict(store.properties))

    def describe(self, target: Any) -> dict[str, Any] | None:
        from dsflow.adapters.kinesis.admin import describe_stream

        info = describe_stream(target.settings, target.name)
        return None if info is None else {"store": target.store, "type": target.store_type, "stream": info.name,
                                          "status": info.status, "shards": info.open_shards,
                                          "shard_ids": list(info.shards), "retention_hours": info.retention_hours}

    def create(self, target: Any, sizes: dict[str, int | None]) -> bool:
        from dsflow.adapters.kinesis.admin import ensure_stream

        shards = sizes.get("shards") or (target.relation.partitions if target.relation is not None else 1)
        return ensure_stream(target.settings, target.name, shards)

    def delete(self, target: Any) -> bool:
        from dsflow.adapters.kinesis.admin import delete_stream

        return delete_stream(target.settings, target.name)

    def record_limit(self, target: Any) -> tuple[int, str]:
        """The largest record in bytes, and the hint of DSF-E715."""
        return RECORD_BYTES, "split the record: a Kinesis record holds 1 MiB, data and partition key together"

    def produce(self, target: Any, lines: list[str], key_field: str | None) -> int:
        """Put checked lines, each a JSON object: a relation's stream gets its columns in its value format."""
        from dsflow.adapters.kinesis.records import put_json_lines, relation_codec

        return put_json_lines(target.settings, target.name, json_objects(lines), key_field=key_field,
                              codec=relation_codec(target.relation, target.registry))

    def read(self, target: Any, from_beginning: bool, limit: int | None, timeout: float, raw: bool,
             stop: Any = None, on_start: Any = None) -> tuple[Iterator[dict[str, Any]], bool]:
        """The stream's records until `timeout` idle seconds (with `stop`: until it is set), and whether they are
        decoded already (a relation's value format other than json: by its codec)."""
        from dsflow.adapters.kinesis.records import read_records, relation_codec

        codec = None if raw else relation_codec(target.relation, target.registry)
        return (read_records(target.settings, target.name, from_beginning, limit, timeout, codec, stop, on_start),
                codec is not None)

    def dead_letter_topic(self, project: Any, query: Any) -> str | None:
        return query.dlq_topic or None  # only when 'dlq.topic' names the stream

    def dead_letter_count(self, store: Any, topic: str) -> int | None:
        from dsflow.adapters.kinesis.admin import stream_settings
        from dsflow.adapters.kinesis.decoding import dead_letter_count

        return dead_letter_count(stream_settings(store), topic)


def json_objects(lines: Iterable[str]) -> list[str]:
    """Every line must be a JSON object before anything is put (DSF-E706 names the line); blank lines are
    skipped."""
    from dsflow.errors import DsflowError

    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            ok = isinstance(json.loads(line), dict)
        except ValueError:
            ok = False
        if not ok:
            raise DsflowError("DSF-E706", f"line {number} is not a JSON object: {line.strip()[:80]}",
                              hint="give one JSON object per line")
        out.append(line)
    return out


COMMANDS = KinesisCommands()
