"""Reading one partition's offset range [start, end) so that every offset is accounted for.

A micro-batch's read task, `dsflow topic`, and the tests all read ranges through `read_range`. The rule it keeps:
every offset in the range is either delivered, in order, exactly once, or is a *gap* the broker confirmed by
being asked again. Nothing is skipped silently:

- a list handed to the caller always starts exactly at the current position and has no hole;
- when the broker's answer jumps (the next record delivered is past the position, or the consumer's position
  moves past it with nothing delivered: control records, compaction, retention), the offsets are read again from
  a fresh assignment (`GAP_RETRY_WAITS`, or once, `COUNTED_GAP_WAITS`, where gaps are allowed), with a pause
  before each. A record that shows up is read in order.
  A gap that persists is *confirmed*: with `allow_gaps` (compacted topics, transaction markers) it is counted and
  reported to `on_gap`; otherwise the read raises DSF-E709, the read task fails, and with it the micro-batch, so
  the checkpoint never moves past records that were not read;
- at the end, records delivered + offsets in confirmed gaps == end - start, or DSF-E709.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from dsflow.errors import DsflowError

LOG = logging.getLogger("dsflow.kafka")

FATAL_READ = {"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "TOPIC_AUTHORIZATION_FAILED"}

GAP_RETRY_WAITS = (0.1, 0.5, 1.5)
"""Seconds to wait before each re-read of offsets the broker skipped; a gap still there after the last is confirmed
(and, where gaps are not allowed, fails the read)."""

COUNTED_GAP_WAITS = (0.05,)
"""Where gaps are allowed (compacted topics, transaction markers: many gaps by design), one quick re-read: the
broker's out-of-order window lasts milliseconds, and a gap per transaction must not cost seconds."""

CONSUME_WAIT = 0.5
"""Seconds one consume waits for the records asked for (fewer may come)."""

COUNTED_CONSUME_WAIT = 0.05
"""The same where gaps are allowed: a range holding offsets without records (a transaction marker per transaction
of an exactly-once sink) never delivers all it asks for, so each consume would wait its whole time."""

PROBE_TIMEOUT_S = 2.0
"""How long one re-read waits for the broker's first answer."""

OnGap = Callable[[str, int, int, int], None]
"""Called with (topic, partition, first offset, end offset) for each confirmed gap that is allowed."""


def read_range(
    consumer: Any, topic: str, partition: int, start: int, end: int, max_batch: int = 10_000,
    stall_timeout: float = 60.0, allow_gaps: bool = False, on_gap: OnGap | None = None,
) -> Iterator[list]:
    """Messages with start <= offset < end from one partition, in lists of at most `max_batch`, every offset
    accounted for (module docstring). Raises DSF-E704 when no progress is made for `stall_timeout` seconds and
    DSF-E709 for a gap that is not allowed. Unassigns on exit; the caller closes the consumer."""
    if start >= end:
        return
    reader = _RangeReader(consumer, topic, partition, end, max_batch, stall_timeout)
    reader.seek(start)
    try:
        yield from reader.batches(allow_gaps, on_gap)
        reader.check_complete(start)
    finally:
        consumer.unassign()


class _RangeReader:
    """The state of one range read: position, what was delivered and what was confirmed missing."""

    def __init__(self, consumer: Any, topic: str, partition: int, end: int, max_batch: int,
                 stall_timeout: float) -> None:
        self.consumer, self.topic, self.partition, self.end = consumer, topic, partition, end
        self.max_batch, self.stall_timeout = max_batch, stall_timeout
        self.pos = -1
        self.delivered = self.gaps = 0
        self.last_error: str | None = None
        self.where = f"{topic}[{partition}]"

    def seek(self, offset: int) -> None:
        from confluent_kafka import TopicPartition

        self.consumer.unassign()
        self.consumer.assign([TopicPartition(self.topic, self.partition, offset)])
        self.pos = offset

    def batches(self, allow_gaps: bool, on_gap: OnGap | None) -> Iterator[list]:
        progressed_at = time.monotonic()
        wait = COUNTED_CONSUME_WAIT if allow_gaps else CONSUME_WAIT
        while self.pos < self.end:
            messages = self.consumer.consume(min(self.end - self.pos, self.max_batch), wait)
            batch, jump, error = take_contiguous(messages, self.pos, self.end, self.where)
            self.last_error = error or self.last_error
            if batch:
                self.pos, progressed_at = batch[-1].offset() + 1, time.monotonic()
                self.delivered += len(batch)
                yield batch
            elif jump is None:
                jump = self.position_past()
            if jump is not None:
                self.resolve_gap(jump, allow_gaps, on_gap)
                progressed_at = time.monotonic()
            elif not batch and time.monotonic() - progressed_at > self.stall_timeout:
                raise self.stalled()

    def position_past(self) -> int | None:
        """The consumer's position when it moved past `pos` without delivering anything (else None)."""
        from confluent_kafka import TopicPartition

        offset = self.consumer.position([TopicPartition(self.topic, self.partition)])[0].offset
        return min(offset, self.end) if offset > self.pos else None

    def resolve_gap(self, jump: int, allow_gaps: bool, on_gap: OnGap | None) -> None:
        """Read [pos, jump) again; continue at pos if a record shows up, else confirm the gap (count or raise)."""
        gap_start = self.pos
        waits = COUNTED_GAP_WAITS if allow_gaps else GAP_RETRY_WAITS
        for attempt, wait in enumerate(waits, start=1):
            time.sleep(wait)
            first = self.first_offset_from(gap_start)
            if first == gap_start:
                LOG.warning("%s: offsets %d-%d were skipped by a read and found on re-read %d", self.where,
                            gap_start, jump - 1, attempt)
                self.seek(gap_start)
                return
            if first is not None:
                jump = min(jump, first)
        if not allow_gaps:
            raise self.missing(gap_start, jump)
        LOG.info("%s: no records at offsets %d-%d (asked again %d times): counted as a gap", self.where,
                 gap_start, jump - 1, len(waits))
        self.gaps += jump - gap_start
        if on_gap is not None:
            on_gap(self.topic, self.partition, gap_start, jump)
        self.seek(jump)

    def first_offset_from(self, offset: int) -> int | None:
        """The first offset the broker answers with when read from `offset` (a record, or the position the
        consumer moved to past records it does not deliver); None when it answered nothing in time."""
        self.seek(offset)
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while time.monotonic() < deadline:
            for m in self.consumer.consume(1, 0.2):
                if m.error() is None and m.offset() >= offset:
                    return min(m.offset(), self.end)
            past = self.position_past()
            if past is not None:
                return past
        return None

    def check_complete(self, start: int) -> None:
        if self.delivered + self.gaps != self.end - start:
            raise DsflowError("DSF-E709", f"reading {self.where} [{start}, {self.end}) accounted for "
                              f"{self.delivered} records and {self.gaps} offsets in gaps, not {self.end - start}")

    def missing(self, gap_start: int, jump: int) -> DsflowError:
        return DsflowError(
            "DSF-E709",
            f"the broker did not return the records at offsets {gap_start}-{jump - 1} of {self.where} (reading "
            f"up to {self.end}), asked {len(GAP_RETRY_WAITS) + 1} times; the micro-batch fails rather than skip them",
            hint="a topic written in transactions or compacted holds offsets without records: declare it "
                 "('topic.gaps' = 'count'); if records expired (retention), replay from the earliest offset",
        )

    def stalled(self) -> DsflowError:
        cause = f"; last error: {self.last_error}" if self.last_error else ""
        return DsflowError(
            "DSF-E704",
            f"no progress reading {self.where} at offset {self.pos} (reading up to {self.end}) for "
            f"{self.stall_timeout:.0f}s{cause}",
            hint="check that the broker is up and the topic was not deleted or recreated since the offsets were "
                 "recorded",
        )


def take_contiguous(messages: list, pos: int, end: int, where: str) -> tuple[list, int | None, str | None]:
    """(the messages that continue exactly at `pos` without a hole, below `end`; the offset of the first record
    past a hole, or None; the last non-fatal error). Records before `pos` (a re-delivery) are dropped, and so is
    everything from a hole on: it is read again after the hole is resolved.

    Fast path without per-message Python for the common case: no errors, offsets pos, pos+1, ..., all below end.
    """
    if messages and not any(map(_message_error, messages)):
        first, last = messages[0].offset(), messages[-1].offset()
        if first == pos and last < end and last - first == len(messages) - 1:
            return messages, None, None
    batch: list = []
    error, expect = None, pos
    for m in messages:
        err = m.error()
        if err is not None:
            if err.fatal() or err.name() in FATAL_READ:
                raise DsflowError("DSF-E703", f"reading {where} at offset {expect} failed: {err.str()}")
            error = err.str()
            continue
        offset = m.offset()
        if offset < expect:
            continue
        if offset > expect or offset >= end:
            return batch, (min(offset, end) if offset > expect else None), error
        batch.append(m)
        expect = offset + 1
    return batch, None, error


def _message_error(message: Any) -> Any:
    return message.error()
