"""Timing of dsflow's Kafka source and sink phases in every Python process Spark starts (bench/latency_breakdown.py).

On PYTHONPATH with DSFLOW_KAFKA_TRACE=<file> set, this wraps the phases of a micro-batch (the driver-side source
runner's latestOffset/partitions/commit, the read task's consumer, range read and Arrow conversion, the write task's
producer, produce and flush, the sink's commit) and appends one JSON line per call to the file: process id, phase,
start and end (epoch seconds), rows. Without the variable it does nothing. Bench only: no product code imports it.
"""

from __future__ import annotations

import functools
import json
import os
import time

_PATH = os.environ.get("DSFLOW_KAFKA_TRACE")


def _note(phase: str, start: float, end: float, **extra: object) -> None:
    line = json.dumps({"pid": os.getpid(), "phase": phase, "start": start, "end": end, **extra})
    with open(_PATH, "a", encoding="utf-8") as out:  # type: ignore[arg-type]
        out.write(line + "\n")


def _timed(owner: object, name: str, phase: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            _note(phase, start, time.time())

    setattr(owner, name, wrapper)


def _timed_generator(owner: object, name: str, phase: str) -> None:
    """A generator's time from its first step to its end, the time spent inside it (not in its consumer), rows."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start, inside, rows = time.time(), 0.0, 0
        it = original(*args, **kwargs)
        try:
            while True:
                t = time.time()
                try:
                    item = next(it)
                except StopIteration:
                    inside += time.time() - t
                    return
                inside += time.time() - t
                rows += getattr(item, "num_rows", None) or (len(item) if isinstance(item, list) else 0)
                yield item
        finally:
            _note(phase, start, time.time(), inside=inside, rows=rows)

    setattr(owner, name, wrapper)


def _install() -> None:
    from dsflow.adapters.kafka import client, datasource, writing

    _timed(datasource.KafkaStreamReader, "latestOffset", "source.latestOffset")
    _timed(datasource.KafkaStreamReader, "partitions", "source.partitions")
    _timed(datasource.KafkaStreamReader, "commit", "source.commit")
    _timed(datasource._ConsumerHolder, "end_offsets", "source.end_offsets")
    _timed(client, "new_consumer", "client.new_consumer")
    _timed(client, "new_producer", "client.new_producer")
    _timed_generator(datasource, "_read_range", "read.task")
    _timed_generator(client, "read_range", "read.range")
    _timed(datasource, "to_record_batch", "read.to_arrow")
    _timed(datasource, "decode_records", "read.decode")
    _timed(writing, "_produce_batches", "write.task")
    _timed(client, "flush_or_raise", "write.flush")
    _timed(writing.KafkaStreamWriter, "commit", "write.commit")
    _timed(datasource.KafkaDataSource, "streamWriter", "write.plan")
    _timed(datasource.KafkaDataSource, "streamReader", "source.reader")


if _PATH:
    try:
        _install()
    except Exception as err:  # a process without dsflow on its path: nothing to time
        _note("trace.error", time.time(), time.time(), error=repr(err))
