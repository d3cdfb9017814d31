"""Reading one shard between two offset positions (see datasource.py for the positions).

    read_shard     from a position as far as there are records (or a budget, or a cutoff time):
                   the records and the new position; used by the driver to find a batch's end
    replay_range   the records between two positions again (a batch planned again after a restart)
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from dsflow.errors import DsflowError

CLOSED = "closed"
LATEST = "latest"
"""Only records put after the iterator is made (a tail; never a checkpointed position)."""
GET_LIMIT = 10_000
ARRIVAL_SLACK_MS = 1_000
"""ApproximateArrivalTimestamp is approximate (kinesalite rounds it up to the second): a record put just before an
availableNow run starts may carry a later time; it still belongs to the run."""
EMPTY_POLLS = 3
"""Empty GetRecords answers in a row after which a shard counts as caught up (Kinesis may answer empty
while records follow; MillisBehindLatest = 0 ends the read at once)."""
REPLAY_TRIES = 50


@dataclass(frozen=True)
class Record:
    """One Kinesis record as the reader hands it on."""

    key: str
    data: bytes
    """The record's bytes as they were put (decoded by its relation's format: decoding.py)."""
    sequence: str
    arrival_ms: int


def initial_positions(shards: list[dict[str, Any]], position: str, timestamp: int | None,
                      carried: Mapping[str, str] | None, now_ms: int) -> dict[str, str]:
    """Where a new checkpoint starts on each shard: carried positions first, then the timestamp or position."""
    from dsflow.adapters.kinesis.client import is_open

    positions = {}
    for shard in shards:
        sid = shard["ShardId"]
        if carried and sid in carried:
            positions[sid] = carried[sid]
        elif timestamp is not None:
            positions[sid] = f"at:{timestamp}"
        elif position == "latest":
            positions[sid] = f"at:{now_ms}" if is_open(shard) else CLOSED
        else:
            positions[sid] = "trim"
    return positions


def eligible(shards: list[dict[str, Any]], start: Mapping[str, str]) -> list[dict[str, Any]]:
    """Shards that may be read in this batch: a child only after the batches before drained its parents."""
    listed = {s["ShardId"] for s in shards}
    out = []
    for shard in shards:
        parents = [shard.get("ParentShardId"), shard.get("AdjacentParentShardId")]
        if all(p is None or p not in listed or start.get(p) == CLOSED for p in parents):
            out.append(shard)
    return out


def shard_iterator(client: Any, stream: str, shard: str, position: str) -> str:
    args: dict[str, Any] = {"StreamName": stream, "ShardId": shard}
    if position.startswith("after:"):
        args.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=position[6:])
    elif position == LATEST:
        args.update(ShardIteratorType="LATEST")
    elif position.startswith("at:"):
        args.update(ShardIteratorType="AT_TIMESTAMP",
                    Timestamp=datetime.fromtimestamp(int(position[3:]) / 1000, tz=timezone.utc))
    else:
        args.update(ShardIteratorType="TRIM_HORIZON")
    with shard_errors(stream, shard, position):
        return client.get_shard_iterator(**args)["ShardIterator"]


@contextmanager
def shard_errors(stream: str, shard: str, position: str) -> Iterator[None]:
    """Kinesis's answers for a stream that is gone (deleted) or another one (deleted and created again: its shard
    does not hold the position) as DSF-E763 naming the shard; any other error passes unchanged."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 - only the two answers below are named; others pass unchanged
        code = getattr(err, "response", {}).get("Error", {}).get("Code")
        if code == "ResourceNotFoundException":
            raise DsflowError("DSF-E763", f"cannot read Kinesis shard {stream}/{shard}: the stream or shard does "
                              f"not exist: {err}", hint=GONE_HINT) from err
        if code == "InvalidArgumentException" and position.startswith("after:"):
            raise DsflowError("DSF-E763", f"cannot read Kinesis shard {stream}/{shard} after sequence "
                              f"{position[6:]}: the shard does not hold that position; the stream was deleted and "
                              f"created again under the query's checkpoint", hint=GONE_HINT) from err
        raise


GONE_HINT = "run dsflow plan: a stream created again is another log, which the plan replays from its start"


def _record(raw: Mapping[str, Any]) -> Record:
    arrival = raw.get("ApproximateArrivalTimestamp")
    ms = int(arrival.timestamp() * 1000) if arrival is not None else 0
    return Record(raw.get("PartitionKey", ""), bytes(raw["Data"]), raw["SequenceNumber"], ms)


def read_shard(client: Any, stream: str, shard: str, position: str, budget: int,
               cutoff_ms: int | None = None) -> tuple[list[Record], str]:
    """Records after `position` (at most `budget`, none that arrived more than ARRIVAL_SLACK_MS after
    `cutoff_ms`) and the new position."""
    iterator = shard_iterator(client, stream, shard, position)
    records: list[Record] = []
    empties = 0
    while True:
        with shard_errors(stream, shard, position):
            response = client.get_records(ShardIterator=iterator, Limit=max(1, min(GET_LIMIT, budget - len(records))))
        batch = [_record(r) for r in response["Records"]]
        _check_ascending(records[-1:] + batch, stream, shard)
        late = [r for r in batch if cutoff_ms is not None and r.arrival_ms > cutoff_ms + ARRIVAL_SLACK_MS]
        records += batch[:batch.index(late[0])] if late else batch
        iterator = response.get("NextShardIterator")
        if late or len(records) >= budget:
            break
        if iterator is None:
            return records, CLOSED
        empties = empties + 1 if not batch else 0
        if not batch and (response.get("MillisBehindLatest", 0) == 0 or empties >= EMPTY_POLLS):
            break
    return records, (f"after:{records[-1].sequence}" if records else position)


def _end_missing(stream: str, shard: str, start: str, last: int, found: str) -> DsflowError:
    """A replay read past the sequence number the batch ends at without meeting it: the shard does not hold the
    batch's records as they were planned, and the batch fails rather than end somewhere else."""
    return DsflowError("DSF-E709", f"Kinesis shard {stream}/{shard}: replaying the batch from {start} up to sequence "
                       f"{last} met sequence {found} without the record at {last}",
                       hint="the stream was recreated or resharded under the checkpoint; restart the query from a "
                            "known position ('start.position')")


def _check_ascending(records: list[Record], stream: str, shard: str) -> None:
    """DSF-E709 if the shard answered records out of order or twice (sequence numbers of a shard only grow)."""
    numbers = [int(r.sequence) for r in records]
    if any(b <= a for a, b in zip(numbers, numbers[1:], strict=False)):
        raise DsflowError("DSF-E709", f"Kinesis shard {stream}/{shard} returned sequence numbers out of order: "
                          f"{numbers[:5]}...", hint="check the Kinesis endpoint")


def replay_range(client: Any, stream: str, shard: str, start: str, end: str) -> list[Record]:
    """The records after `start` up to `end` (a sequence number, or the end of a closed shard): the record at the
    end's sequence number must be among them (DSF-E709 if the shard answers past it, DSF-E764 if it expired)."""
    last = int(end[6:]) if end.startswith("after:") else None
    iterator = shard_iterator(client, stream, shard, start)
    records: list[Record] = []
    empties = 0
    while iterator is not None:
        response = client.get_records(ShardIterator=iterator, Limit=GET_LIMIT)
        for raw in response["Records"]:
            record = _record(raw)
            if last is not None and int(record.sequence) > last:
                raise _end_missing(stream, shard, start, last, record.sequence)
            records.append(record)
            if last is not None and int(record.sequence) == last:
                return records
        iterator = response.get("NextShardIterator")
        empties = empties + 1 if not response["Records"] else 0
        if empties > REPLAY_TRIES:
            break
        if empties:
            time.sleep(0.1)
    if last is not None:
        raise DsflowError("DSF-E764", f"Kinesis shard {stream}/{shard} no longer holds the records up to sequence "
                          f"{last} that the checkpoint names (expired by the retention period?)",
                          hint="start the query again from a new checkpoint (dsflow apply -replace=query....)")
    return records
