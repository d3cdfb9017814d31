"""Kinesis's physical-object operations (adapters/objects.py): a stream's identity (its ARN and creation time: a
stream deleted and created again under the same name is another stream) and the records it holds (counted by
reading its shards: Kinesis has no offsets to subtract)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class KinesisObjects:
    def identities(self, store: Any, names: list[str]) -> dict[str, str]:
        from dsflow.adapters.kinesis.client import new_client, unreachable

        settings = dict(store.properties)
        client = new_client(settings)
        found: dict[str, str] = {}
        for name in names:
            try:
                summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
            except client.exceptions.ResourceNotFoundException:
                continue
            except Exception as err:  # noqa: BLE001 - connection and credential errors become one clear error
                raise unreachable(settings, err) from err
            created = summary.get("StreamCreationTimestamp")
            found[name] = f"{summary['StreamARN']}@{created.timestamp() if created is not None else ''}"
        return found

    def sizes(self, store: Any, names: list[str]) -> dict[str, int]:
        """The open shards of the named streams that exist."""
        from dsflow.adapters.kinesis.admin import describe_stream

        settings = dict(store.properties)
        found = {name: describe_stream(settings, name) for name in names}
        return {name: info.open_shards for name, info in found.items() if info is not None and info.open_shards}

    def held_records(self, store: Any, outputs: Mapping[str, Any], data: Mapping[str, Any],
                     since: str | None = None) -> int | None:
        stream = outputs.get("topic") or data.get("topic")
        return count_records(dict(store.properties), stream, since) if stream else None

    def executor(self, data: Mapping[str, Any], outputs: Mapping[str, Any], store_type: str | None) -> Any:
        """A relation's Kinesis stream: one recorded as such, or any relation of a kinesis store."""
        from dsflow.adapters.kinesis.executor import MARK, StreamExecutor

        return StreamExecutor() if outputs.get(MARK) or store_type == "kinesis" else None

    def observe(self, project: Any, deployed: Any, cache: dict[str, Any]) -> Any:
        """Refresh of a deployed stream (recorded as one); None for anything else."""
        from dsflow.adapters.kinesis.executor import MARK, observe

        return observe(project, deployed) if deployed.outputs.get(MARK) else None


def count_records(settings: Mapping[str, str], stream: str, since: str | None = None) -> int | None:
    """Records the stream holds (those that arrived at or after epoch ms `since` when given), read shard by shard
    to the tip; None if there is no such stream."""
    from dsflow.adapters.kinesis.admin import describe_stream
    from dsflow.adapters.kinesis.client import list_shards, new_client
    from dsflow.adapters.kinesis.offsets import shard_iterator

    if describe_stream(settings, stream) is None:
        return None
    client = new_client(settings)
    position = f"at:{since}" if since and since.isdigit() else "trim"
    count = 0
    for shard in list_shards(client, stream):
        iterator = shard_iterator(client, stream, shard["ShardId"], position)
        while iterator:
            response = client.get_records(ShardIterator=iterator, Limit=10_000)
            count += len(response["Records"])
            iterator = response.get("NextShardIterator")
            if not response["Records"] and not response.get("MillisBehindLatest"):
                break
    return count


OBJECTS = KinesisObjects()
