"""Kinesis streams for apply, destroy, refresh and the topic commands: create, wait until ACTIVE, describe,
list and delete."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsflow.adapters.kinesis.client import is_open, list_shards, new_client, unreachable  # noqa: F401 (re-exported)
from dsflow.errors import DsflowError

WAIT_SECONDS = 120.0


@dataclass(frozen=True)
class StreamInfo:
    """What describe_stream tells about a stream."""

    name: str
    status: str
    open_shards: int
    shards: tuple[str, ...]
    """Every shard id, closed ones (parents of a reshard) included."""
    retention_hours: int = 24


def describe_stream(settings: Mapping[str, str], name: str) -> StreamInfo | None:
    """The stream, or None if there is none of that name."""
    client = new_client(settings)
    try:
        summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        shards = list_shards(client, name) if summary["StreamStatus"] != "CREATING" else []
    except client.exceptions.ResourceNotFoundException:
        return None
    except Exception as err:  # noqa: BLE001 - connection and credential errors become one clear error
        raise unreachable(settings, err) from err
    return StreamInfo(name, summary["StreamStatus"], sum(1 for s in shards if is_open(s)),
                      tuple(s["ShardId"] for s in shards), int(summary.get("RetentionPeriodHours", 24)))


def list_streams(settings: Mapping[str, str]) -> list[str]:
    client = new_client(settings)
    names: list[str] = []
    try:
        response = client.list_streams()
        names += response["StreamNames"]
        while response.get("HasMoreStreams"):
            response = client.list_streams(ExclusiveStartStreamName=names[-1])
            names += response["StreamNames"]
    except Exception as err:  # noqa: BLE001
        raise unreachable(settings, err) from err
    return sorted(names)


def wait_active(settings: Mapping[str, str], name: str, timeout: float = WAIT_SECONDS) -> StreamInfo:
    """Poll until the stream is ACTIVE (a new stream is CREATING for a while)."""
    deadline = time.monotonic() + timeout
    while True:
        info = describe_stream(settings, name)
        if info is not None and info.status == "ACTIVE":
            return info
        if time.monotonic() > deadline:
            raise DsflowError("DSF-E761", f"Kinesis stream '{name}' is not ACTIVE after {timeout:.0f}s "
                              f"(status {info.status if info else 'missing'})", hint="retry the apply")
        time.sleep(0.1)


def ensure_stream(settings: Mapping[str, str], name: str, shards: int) -> bool:
    """Create the stream unless it exists, and wait until it is ACTIVE; True if this call created it."""
    created = False
    if describe_stream(settings, name) is None:
        client = new_client(settings)
        try:
            client.create_stream(StreamName=name, ShardCount=shards)
            created = True
        except client.exceptions.ResourceInUseException:
            pass  # created concurrently
        except Exception as err:  # noqa: BLE001
            raise unreachable(settings, err) from err
    wait_active(settings, name)
    return created


def delete_stream(settings: Mapping[str, str], name: str, wait: bool = True) -> bool:
    """Delete the stream; False if there was none. With `wait`, return once it is gone."""
    client = new_client(settings)
    try:
        client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)
    except client.exceptions.ResourceNotFoundException:
        return False
    except Exception as err:  # noqa: BLE001
        raise unreachable(settings, err) from err
    deadline = time.monotonic() + WAIT_SECONDS
    while wait and describe_stream(settings, name) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


def stream_settings(store: Any) -> dict[str, str]:
    """A kinesis store's client settings (its properties)."""
    return dict(store.properties) if store is not None else {}
