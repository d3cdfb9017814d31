"""Kafka clients kept alive across the tasks a Python worker runs, instead of one new client per task.

Spark reuses its Python workers (`spark.python.worker.reuse`, on by default): the read and write tasks of
one micro-batch after another run in the same processes. A new Consumer or Producer per task paid the
connection, the metadata request and the first fetch every micro-batch: at 10,000 events/s that was ~50-100 ms
of each task of a ~1 s batch, straight into end-to-end latency (docs/benchmarks.md, "Latency").

A client goes back to the pool only after a task that succeeded with it: a consumer is unassigned by
`client.read_range` (its fetch queue purged), and a producer was flushed with no delivery error. Anything
else closes it. Clients are keyed by their kind, configuration and streaming run, so two queries with different
settings never share one and a run's clients are never handed to another run; at most `KEEP` idle clients of each
key (a worker runs one task at a time). A worker serves the reads and writes of several runs in turn (a query's
source and its sink, a join's two sources, the queries of a shared application), so a run's idle clients are
closed only once it has not taken one for `STALE_S`, or when more than `RUNS` runs of a kind and configuration
hold idle clients (the least recently used first).
`DSFLOW_KAFKA_REUSE=0` in the environment turns pooling off (a new client per task, as before).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any

from dsflow.adapters.kafka import client

KEEP = 2
RUNS = 4
STALE_S = 60.0
REUSE_ENV = "DSFLOW_KAFKA_REUSE"

_consumers: dict[str, list[Any]] = {}
_producers: dict[str, list[tuple[Any, client.DeliveryErrors]]] = {}
_runs: dict[str, dict[str, float]] = {}
"""Per kind and configuration, the runs holding pooled clients and when each last took one (see `_start_turn`)."""


def _enabled() -> bool:
    return os.environ.get(REUSE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _key(config: Mapping[str, Any], run: str) -> str:
    return f"{json.dumps(config, sort_keys=True, default=str)}|{run}"


def _start_turn(kind: str, config: Mapping[str, Any], run: str) -> str:
    """The pool key of this configuration and streaming run. A run's clients are never handed to another run: a
    pooled producer taken over by the next run of the same query in the same worker (a query stopped and started
    again in one Spark session) crashed that worker. The idle clients of other runs of the configuration that went
    `STALE_S` without taking one, or beyond the `RUNS` most recent, are closed."""
    settings = json.dumps(config, sort_keys=True, default=str)
    now = time.monotonic()
    runs = _runs.setdefault(f"{kind}|{settings}", {})
    runs[run] = now
    others = sorted((r for r in runs if r != run), key=runs.__getitem__, reverse=True)
    for before in others[RUNS - 1:] + [r for r in others[:RUNS - 1] if now - runs[r] > STALE_S]:
        del runs[before]
        _close_idle(kind, f"{settings}|{before}")
    return f"{settings}|{run}"


def _close_idle(kind: str, key: str) -> None:
    if kind == "consumer":
        for c in _consumers.pop(key, []):
            c.close()
    else:
        for p, _ in _producers.pop(key, []):
            p.flush(0)


def consumer(config: Mapping[str, Any], run: str = "") -> Any:
    """An idle consumer made with `config` for this run, or a new one; hand it back with `release_consumer`."""
    idle = _consumers.get(_start_turn("consumer", config, run))
    return idle.pop() if idle else client.new_consumer(config)


def release_consumer(config: Mapping[str, Any], c: Any, ok: bool, run: str = "") -> None:
    """Keep `c` for the run's next task if the task succeeded (and pooling is on); close it otherwise."""
    idle = _consumers.setdefault(_key(config, run), [])
    if ok and _enabled() and len(idle) < KEEP:
        idle.append(c)
    else:
        c.close()


def producer(config: Mapping[str, Any], run: str = "") -> tuple[Any, client.DeliveryErrors]:
    """An idle producer made with `config` for this run and its (emptied) delivery-error list, or a new pair."""
    idle = _producers.get(_start_turn("producer", config, run))
    if idle:
        found, errors = idle.pop()
        errors.clear()
        return found, errors
    errors = client.DeliveryErrors()
    return client.new_producer(config, errors), errors


def release_producer(config: Mapping[str, Any], pair: tuple[Any, client.DeliveryErrors], ok: bool,
                     run: str = "") -> None:
    """Keep a flushed producer without delivery errors for the run's next task; drop it otherwise (its queue was
    flushed or failed: nothing is left to deliver)."""
    idle = _producers.setdefault(_key(config, run), [])
    if ok and not pair[1] and len(pair[0]) == 0 and _enabled() and len(idle) < KEEP:
        idle.append(pair)
