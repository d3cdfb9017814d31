"""A boto3 Kinesis client made from a kinesis store's settings.

Settings (store `properties`, or data source options with the `kinesis.` prefix): region, endpoint (an
endpoint URL such as kinesalite's http://127.0.0.1:4567), access_key_id, secret_access_key, session_token.
Without keys boto3's default credential chain applies. Clients are not picklable: make them where used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dsflow.errors import DsflowError

SETTINGS = ("region", "endpoint", "access_key_id", "secret_access_key", "session_token")
PREFIX = "kinesis."
DEFAULT_REGION = "us-east-1"


def settings_of(options: Mapping[str, str], prefix: str = PREFIX) -> dict[str, str]:
    """The kinesis settings among `options` (keys `kinesis.<setting>`), prefix removed."""
    return {k[len(prefix):]: str(v) for k, v in options.items() if k.startswith(prefix) and k[len(prefix):] in SETTINGS}


def prefixed(settings: Mapping[str, str]) -> dict[str, str]:
    return {f"{PREFIX}{k}": v for k, v in settings.items() if k in SETTINGS and v != ""}


def new_client(settings: Mapping[str, str]) -> Any:
    """A boto3 Kinesis client with retries for throttling (adaptive mode: client-side rate limiting as well).

    Five attempts, as the AWS SDKs' legacy default: botocore retries a refused connection like a throttled call,
    and ten attempts made a dead endpoint take over a minute to report (DSF-E760/E763)."""
    import boto3
    from botocore.config import Config

    region = settings.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    kwargs: dict[str, Any] = {"region_name": region or DEFAULT_REGION,
                              "config": Config(retries={"max_attempts": 5, "mode": "adaptive"},
                                               connect_timeout=5, read_timeout=30)}
    if settings.get("endpoint"):
        kwargs["endpoint_url"] = settings["endpoint"]
    if settings.get("access_key_id"):
        kwargs["aws_access_key_id"] = settings["access_key_id"]
        kwargs["aws_secret_access_key"] = settings.get("secret_access_key", "")
        if settings.get("session_token"):
            kwargs["aws_session_token"] = settings["session_token"]
    return boto3.client("kinesis", **kwargs)


def unreachable(settings: Mapping[str, str], err: Exception) -> DsflowError:
    where = settings.get("endpoint") or f"region {settings.get('region') or DEFAULT_REGION}"
    return DsflowError("DSF-E760", f"Kinesis at {where} failed: {err}",
                       hint="check the kinesis store's endpoint, region and credentials")


def list_shards(client: Any, stream: str) -> list[dict[str, Any]]:
    """Every shard of the stream (open and closed), paginated."""
    shards: list[dict[str, Any]] = []
    response = client.list_shards(StreamName=stream)
    shards += response["Shards"]
    while response.get("NextToken"):
        response = client.list_shards(NextToken=response["NextToken"])
        shards += response["Shards"]
    return shards


def is_open(shard: Mapping[str, Any]) -> bool:
    return "EndingSequenceNumber" not in shard.get("SequenceNumberRange", {})
