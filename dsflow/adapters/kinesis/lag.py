"""How far a query is behind a Kinesis stream: per shard, the age in milliseconds of the oldest record the query
has not read yet (what CloudWatch calls the iterator age). Kinesis positions are sequence numbers, not counts of
records, so the lag is a time; one GetRecords of one record per shard measures it."""

from __future__ import annotations

import json
import time
from typing import Any

from dsflow.adapters.kinesis import client as kc
from dsflow.adapters.kinesis.offsets import CLOSED, shard_iterator


class ShardAges:
    """The age of each shard's oldest unread record, through one client per store settings, kept until `close`."""

    unit = "millis"

    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}

    def behind(self, source: Any, offsets: dict[str, str]) -> dict[str, int]:
        client = self._client(source.client_config)
        now_ms = int(time.time() * 1000)
        return {shard: self._age(client, source.topic, shard, str(position), now_ms)
                for shard, position in offsets.items()}

    @staticmethod
    def _age(client: Any, stream: str, shard: str, position: str, now_ms: int) -> int:
        if position == CLOSED:
            return 0
        response = client.get_records(ShardIterator=shard_iterator(client, stream, shard, position), Limit=1)
        if response["Records"]:
            arrival = response["Records"][0].get("ApproximateArrivalTimestamp")
            return max(0, now_ms - int(arrival.timestamp() * 1000)) if arrival is not None else 0
        return int(response.get("MillisBehindLatest") or 0)  # an empty answer may still have records after it

    def _client(self, settings: dict[str, str]) -> Any:
        key = json.dumps(settings, sort_keys=True)
        if key not in self._clients:
            self._clients[key] = kc.new_client(settings)
        return self._clients[key]

    def close(self) -> None:
        self._clients.clear()
