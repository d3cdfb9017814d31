"""PutRecords in batches (at most 500 records and 5 MiB each), retrying throttled and failed records."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from dsflow.errors import DsflowError

MAX_RECORDS = 500
MAX_BYTES = 5 * 1024 * 1024
MAX_ATTEMPTS = 12
RETRYABLE = {"ProvisionedThroughputExceededException", "InternalFailure", "ServiceUnavailable",
             "ThrottlingException", "LimitExceededException", "KMSThrottlingException"}


def partition_key(key: str | None, data: bytes) -> str:
    """The record's key, or a hash of its data when it has none (Kinesis needs 1..256 characters)."""
    if key and len(key) <= 256:
        return key
    return hashlib.md5(key.encode() if key else data).hexdigest()


def entries_of(batches: Iterable[Any], serialize: Callable[[list], list] | None = None) -> Iterator[dict[str, Any]]:
    """PutRecords entries from Arrow batches with a `value` and maybe a `key` column; `serialize` turns the
    values (structs of a value format other than json) into bytes. A null value is an empty record."""
    for batch in batches:
        names = {n.lower(): i for i, n in enumerate(batch.schema.names)}
        values = batch.column(names["value"]).to_pylist()
        if serialize is not None:
            values = serialize(values)
        keys = batch.column(names["key"]).to_pylist() if "key" in names else [None] * batch.num_rows
        for value, key in zip(values, keys, strict=False):
            data = value if isinstance(value, bytes) else (value or "").encode()
            yield {"Data": data, "PartitionKey": partition_key(key if not isinstance(key, bytes) else key.decode(),
                                                               data)}


def put_batches(client: Any, stream: str, batches: Iterable[Any],
                serialize: Callable[[list], list] | None = None) -> int:
    """Put every row of the Arrow batches into the stream; returns the count."""
    return put_entries(client, stream, entries_of(batches, serialize))


def put_entries(client: Any, stream: str, entries: Iterable[dict[str, Any]]) -> int:
    count = 0
    chunk: list[dict[str, Any]] = []
    size = 0
    for entry in entries:
        entry_size = len(entry["Data"]) + len(entry["PartitionKey"])
        if chunk and (len(chunk) >= MAX_RECORDS or size + entry_size > MAX_BYTES):
            count += _put_all(client, stream, chunk)
            chunk, size = [], 0
        chunk.append(entry)
        size += entry_size
    if chunk:
        count += _put_all(client, stream, chunk)
    return count


def _put_all(client: Any, stream: str, entries: list[dict[str, Any]]) -> int:
    """One PutRecords, then again with only the failed entries, backing off, until all are in."""
    pending = entries
    for attempt in range(MAX_ATTEMPTS):
        try:
            response = client.put_records(StreamName=stream, Records=pending)
        except Exception as err:  # noqa: BLE001 - throttled as a whole: back off and retry
            if _code(err) not in RETRYABLE or attempt == MAX_ATTEMPTS - 1:
                raise DsflowError("DSF-E765", f"PutRecords to Kinesis stream '{stream}' failed: {err}",
                                  hint="check that the stream exists and the store's credentials") from err
            time.sleep(min(2.0, 0.05 * 2 ** attempt))
            continue
        if not response.get("FailedRecordCount"):
            return len(entries)
        failed = [(e, r) for e, r in zip(pending, response["Records"], strict=False) if r.get("ErrorCode")]
        pending = [e for e, _ in failed]
        last_error = failed[0][1]
        time.sleep(min(2.0, 0.05 * 2 ** attempt))
    raise DsflowError("DSF-E765", f"{len(pending)} record(s) could not be put into Kinesis stream '{stream}' after "
                      f"{MAX_ATTEMPTS} attempts: {last_error.get('ErrorCode')}: {last_error.get('ErrorMessage')}",
                      hint="the stream is throttled: add shards, or lower the query's rate")


def _code(err: Exception) -> str:
    response = getattr(err, "response", None) or {}
    return str(response.get("Error", {}).get("Code", type(err).__name__))
