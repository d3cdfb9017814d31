"""Values of Kinesis records by format, with the decoders every store uses (formats/decoding.py).

    decode_records   a chunk of records -> (records kept, their `__value` struct array or None for json,
                     the records that did not decode with the reason)
    DeadLetterStream puts records that did not decode into the query's dead-letter stream
    undecodable      the error that stops a query whose record does not decode and that has no 'dlq.topic'

Kinesis records have no headers, so a dead letter is a JSON envelope (see DeadLetterStream). An empty
record (no data) is a tombstone: a record whose columns are all null, as a log record without a value.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dsflow.adapters.kinesis.offsets import Record
from dsflow.errors import DsflowError
from dsflow.formats.arrow import Bad
from dsflow.formats.decoding import Decoding, decode_chunk
from dsflow.formats.json_values import json_problems

DLQ_SHARDS = 1
"""Shards of a dead-letter stream dsflow creates."""


class KinesisMessage:
    """A Kinesis record seen through the accessors the decoders of dsflow/formats/ call (value, key, topic, ...)."""

    __slots__ = ("record", "stream", "shard")

    def __init__(self, record: Record, stream: str, shard: str) -> None:
        self.record = record
        self.stream = stream
        self.shard = shard

    def value(self) -> bytes | None:
        return self.record.data or None  # empty data: a tombstone

    def key(self) -> bytes | None:
        return self.record.key.encode() if self.record.key else None

    def topic(self) -> str:
        return self.stream

    def partition(self) -> str:
        return self.shard

    def offset(self) -> str:
        return self.record.sequence


def decode_records(records: Sequence[Record], stream: str, shard: str,
                   decoding: Decoding) -> tuple[list[int], Any, Bad]:
    """(indexes of the records kept, their `__value` struct array or None for json, the records that failed).
    JSON is checked whenever the columns are known (pyarrow's fast whole-chunk parse first): a Kinesis record
    that does not decode must reach the dead-letter stream or stop the query, never become a row of nulls."""
    messages = [KinesisMessage(r, stream, shard) for r in records]
    if not decoding.decoded:
        if not decoding.columns:  # the raw data source without value.columns: values are any text
            return list(range(len(messages))), None, []
        bad = json_problems([m.value() for m in messages], decoding.columns)
        failed = {i for i, _ in bad}
        return [i for i in range(len(messages)) if i not in failed], None, bad
    return decode_chunk(messages, decoding)


def undecodable(stream: str, shard: str, record: Record, error: str) -> DsflowError:
    return DsflowError("DSF-E773", f"Kinesis record of stream '{stream}', shard {shard}, sequence number "
                       f"{record.sequence} does not decode: {error[:500]}",
                       hint="fix or remove the producer's bad records, or set 'dlq.topic' on the query so records "
                            "that do not decode go to a dead-letter stream; the query stops so nothing is dropped")


def envelope(message: KinesisMessage, error: str, query: str) -> bytes:
    """A dead letter: the record's data (base64, exactly as it was) and where and why it failed."""
    record = message.record
    return json.dumps({"error": error[:2000], "stream": message.stream, "shard": message.shard,
                       "sequence": record.sequence, "partition_key": record.key, "query": query,
                       "arrival_ms": record.arrival_ms,
                       "data_base64": base64.b64encode(record.data).decode("ascii")}).encode()


class DeadLetterStream:
    """Puts records that did not decode into the dead-letter stream of the source's store (created with one
    shard when the first dead letter arrives), each with its partition key as it was and its data in a
    JSON envelope (Kinesis records carry no headers). `send` returns once PutRecords took them all."""

    def __init__(self, settings: Mapping[str, str], decoding: Decoding) -> None:
        self.settings = dict(settings)
        self.stream = decoding.dlq_topic or ""
        self.query = decoding.query
        self.count = 0
        self._client: Any = None

    def send(self, messages: list[KinesisMessage], bad: Bad) -> None:
        if not bad:
            return
        from dsflow.adapters.kinesis.writing import partition_key, put_entries

        if self._client is None:
            from dsflow.adapters.kinesis.admin import ensure_stream
            from dsflow.adapters.kinesis.client import new_client

            ensure_stream(self.settings, self.stream, DLQ_SHARDS)
            self._client = new_client(self.settings)
        entries = []
        for index, error in bad:
            data = envelope(messages[index], error, self.query)
            entries.append({"Data": data, "PartitionKey": partition_key(messages[index].record.key or None, data)})
        self.count += put_entries(self._client, self.stream, entries)


def dead_letter_count(settings: Mapping[str, str], stream: str) -> int | None:
    """Records in a dead-letter stream, counted by reading it from the start (dead letters are few; Kinesis has
    no offsets to subtract); None if the stream does not exist (no dead letter yet)."""
    from dsflow.adapters.kinesis.objects import count_records

    return count_records(settings, stream)
