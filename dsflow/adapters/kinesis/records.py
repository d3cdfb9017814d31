"""Records of a Kinesis stream for the topic commands and tests: put JSON lines, read every shard."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from dsflow.adapters.kinesis.client import list_shards, new_client
from dsflow.adapters.kinesis.offsets import GET_LIMIT, _record, shard_iterator
from dsflow.adapters.kinesis.writing import partition_key, put_entries


def put_json_lines(settings: Mapping[str, str], stream: str, lines: Iterable[str],
                   key_field: str | None = None) -> int:
    """Put each non-empty line (a JSON object) as a record; its partition key is `key_field`'s value if given."""
    def entries() -> Iterator[dict[str, Any]]:
        for line in lines:
            line = line.strip()
            if not line:
                continue
            key = None
            if key_field:
                value = json.loads(line).get(key_field)
                key = None if value is None else str(value)
            data = line.encode()
            yield {"Data": data, "PartitionKey": partition_key(key, data)}

    return put_entries(new_client(settings), stream, entries())


def read_records(settings: Mapping[str, str], stream: str, from_beginning: bool = True, limit: int | None = None,
                 timeout: float = 5.0) -> Iterator[dict[str, Any]]:
    """Records of every shard as dicts (key, value, shard, sequence, timestamp ms), until `limit` records or
    `timeout` seconds without a new one. Shards are read in turn, parents before their children."""
    client = new_client(settings)
    shards = list_shards(client, stream)
    start = "trim" if from_beginning else f"at:{int(time.time() * 1000)}"
    iterators = {s["ShardId"]: shard_iterator(client, stream, s["ShardId"], start) for s in shards}
    count, idle_since = 0, time.monotonic()
    while iterators and time.monotonic() - idle_since < timeout:
        got = False
        for shard_id in list(iterators):
            response = client.get_records(ShardIterator=iterators[shard_id], Limit=GET_LIMIT)
            for raw in response["Records"]:
                record = _record(raw)
                yield {"key": record.key, "value": record.value, "shard": shard_id, "sequence": record.sequence,
                       "timestamp": record.arrival_ms}
                count += 1
                got = True
                if limit is not None and count >= limit:
                    return
            if response.get("NextShardIterator") is None:
                del iterators[shard_id]
            else:
                iterators[shard_id] = response["NextShardIterator"]
        if got:
            idle_since = time.monotonic()
        else:
            time.sleep(0.2)
