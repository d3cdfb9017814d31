"""Synthetic data generators, so example pipelines run by themselves.

A generator turns a sequence number and a seeded `random.Random` into one (key, record) pair.
`run` produces those records as compact JSON to a broker's topic at a steady rate; `main` is the
background process `dsflow apply` starts:

    python -m dsflow.datagen --bootstrap HOST:PORT --topic T --generator pageviews --rate 10

Output is deterministic given the seed and start_seq, except wall-clock timestamps.

Errors: DSF-E711 delivery failed, DSF-E712 unknown generator, DSF-E713 bad column or key
column for the `columns` generator, DSF-E714 invalid rate, count or start_seq.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dsflow.core.secrets import register, scrub
from dsflow.errors import DsflowError

__all__ = [
    "GENERATORS",
    "Columns",
    "DatagenSpec",
    "Generator",
    "Nexmark",
    "Pageviews",
    "Users",
    "build_generator",
    "main",
    "run",
]

FLUSH_INTERVAL_S = 1.0  # flush at least this often, so records show up promptly
FINAL_FLUSH_TIMEOUT_S = 30.0
PROGRESS_INTERVAL_S = 10.0
MAX_LAG_S = 1.0  # after a stall, catch up at most this much backlog in a burst
_STEP_S = 0.05  # longest single sleep, so `stop` is noticed quickly


class Generator(Protocol):
    """Makes record number `seq`; all randomness comes from `rng`."""

    def make(self, seq: int, rng: random.Random) -> tuple[str | None, dict]: ...


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Pageviews:
    """ksqlDB-style page views; `id` is the sequence number, unique per record; key = userid."""

    def make(self, seq: int, rng: random.Random) -> tuple[str | None, dict]:
        userid = f"User_{rng.randint(1, 9)}"
        record = {"viewtime": _now_ms(), "userid": userid, "pageid": f"Page_{rng.randint(1, 99)}", "id": seq}
        return userid, record


class Users:
    """A changelog of user upserts: userid cycles User_1..User_9; key = userid."""

    GENDERS = ("MALE", "FEMALE", "OTHER")

    def make(self, seq: int, rng: random.Random) -> tuple[str | None, dict]:
        userid = f"User_{seq % 9 + 1}"
        record = {
            "registertime": _now_ms(),
            "userid": userid,
            "regionid": f"Region_{rng.randint(1, 9)}",
            "gender": rng.choice(self.GENDERS),
        }
        return userid, record


_TYPE_ALIASES = {
    "BIGINT": "BIGINT", "LONG": "BIGINT",
    "INT": "INT", "INTEGER": "INT",
    "DOUBLE": "DOUBLE", "FLOAT": "DOUBLE",
    "VARCHAR": "VARCHAR", "STRING": "VARCHAR", "TEXT": "VARCHAR",
    "BOOLEAN": "BOOLEAN", "BOOL": "BOOLEAN",
    "TIMESTAMP": "TIMESTAMP", "TIMESTAMP_LTZ": "TIMESTAMP", "TIMESTAMP_NTZ": "TIMESTAMP",
}


def _normalize_type(column: str, sql_type: str) -> str:
    base = re.sub(r"\(.*\)$", "", sql_type.strip()).strip().upper()
    if base not in _TYPE_ALIASES:
        raise DsflowError(
            "DSF-E713", f"datagen column {column!r} has unsupported type {sql_type!r}",
            hint="use BIGINT, INT, DOUBLE, VARCHAR, BOOLEAN or TIMESTAMP",
        )
    return _TYPE_ALIASES[base]


def _random_value(name: str, sql_type: str, rng: random.Random) -> Any:
    if sql_type == "BIGINT":
        return rng.randint(0, 1_000_000)
    if sql_type == "INT":
        return rng.randint(0, 1_000)
    if sql_type == "DOUBLE":
        return round(rng.uniform(0, 1_000), 3)
    if sql_type == "VARCHAR":
        return f"{name}_{rng.randint(1, 9)}"
    if sql_type == "BOOLEAN":
        return rng.random() < 0.5
    return _now_ms()  # TIMESTAMP, as epoch milliseconds


class Columns:
    """Records shaped by a column list; a column named `id` carries the sequence number."""

    def __init__(self, columns: Sequence[tuple[str, str]], key_columns: Sequence[str] = ()):
        if not columns:
            raise DsflowError("DSF-E713", "the columns generator needs at least one column",
                              hint="declare the relation's columns, e.g. [(\"id\", \"BIGINT\")]")
        self.columns = tuple((name, _normalize_type(name, sql_type)) for name, sql_type in columns)
        names = {name for name, _ in self.columns}
        missing = [k for k in key_columns if k not in names]
        if missing:
            raise DsflowError("DSF-E713", f"datagen key column {missing[0]!r} is not a column",
                              hint=f"key columns must be among: {', '.join(sorted(names))}")
        self.key_column = key_columns[0] if key_columns else None

    def make(self, seq: int, rng: random.Random) -> tuple[str | None, dict]:
        record = {}
        for name, sql_type in self.columns:
            if name == "id" and sql_type in ("BIGINT", "INT", "VARCHAR"):
                record[name] = str(seq) if sql_type == "VARCHAR" else seq
            else:
                record[name] = _random_value(name, sql_type, rng)
        if self.key_column is None:
            return None, record
        value = record[self.key_column]
        return (value if isinstance(value, str) else json.dumps(value)), record


class Nexmark:
    """Nexmark persons, auctions or bids (`dsflow.datagen.nexmark`); record `seq` is the seq-th of its kind.

    Values are a pure function of (seed, seq); `date_time` is the wall clock. Key: a person's or
    auction's id, a bid's auction.
    """

    def __init__(self, kind: str, seed: int = 0):
        self.kind = kind
        self.seed = seed

    def make(self, seq: int, rng: random.Random) -> tuple[str | None, dict]:
        from dsflow.datagen import nexmark

        kind, key, record = nexmark.event(nexmark.nth_of_kind(self.kind, seq), self.seed, _now_ms())
        return key, record


@dataclass(frozen=True)
class DatagenSpec:
    """What to generate, where, and how fast."""

    topic: str
    generator: str = "pageviews"
    rate: float = 1.0
    """Records per second; 0 means as fast as possible."""
    count: int | None = None
    """Records to produce; None means until stopped."""
    seed: int = 0
    key_columns: tuple[str, ...] = ()
    """For `columns`: the first one's value is the record key; none means a null key."""
    columns: tuple[tuple[str, str], ...] = ()
    """For `columns`: (name, sql_type) pairs."""
    start_seq: int = 0
    """First sequence number, so a restarted generator continues ids."""

    def __post_init__(self) -> None:
        if self.rate < 0:
            raise DsflowError("DSF-E714", f"datagen rate must be >= 0, got {self.rate}",
                              hint="use 0 for as fast as possible")
        if self.count is not None and self.count < 0:
            raise DsflowError("DSF-E714", f"datagen count must be >= 0, got {self.count}",
                              hint="leave count unset to run until stopped")
        if self.start_seq < 0:
            raise DsflowError("DSF-E714", f"datagen start_seq must be >= 0, got {self.start_seq}")


GENERATORS: dict[str, Callable[[DatagenSpec], Generator]] = {
    "pageviews": lambda spec: Pageviews(),
    "users": lambda spec: Users(),
    "columns": lambda spec: Columns(spec.columns, spec.key_columns),
    "nexmark_bids": lambda spec: Nexmark("bid", spec.seed),
    "nexmark_auctions": lambda spec: Nexmark("auction", spec.seed),
    "nexmark_persons": lambda spec: Nexmark("person", spec.seed),
}


def build_generator(spec: DatagenSpec) -> Generator:
    factory = GENERATORS.get(spec.generator)
    if factory is None:
        raise DsflowError("DSF-E712", f"unknown datagen generator {spec.generator!r}",
                          hint=f"use one of: {', '.join(sorted(GENERATORS))}")
    return factory(spec)


class _Pacer:
    """Deadline pacing: record i is due at start + i/rate, so sleeps never accumulate drift."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic):
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.clock = clock
        self.due = clock()

    def delay(self) -> float:
        return max(0.0, self.due - self.clock()) if self.interval else 0.0

    def advance(self) -> None:
        if not self.interval:
            return
        self.due += self.interval
        floor = self.clock() - MAX_LAG_S
        if self.due < floor:  # stalled: drop the backlog beyond MAX_LAG_S instead of bursting
            self.due = floor


def _sink(bootstrap: str, topic: str, config: Mapping[str, str] | None) -> Any:
    """A producer to the broker's topic that raises DSF-E711 for the first failed delivery (the `commands` facet of
    the store kind that holds generators' topics, core/stores.py: Capability.BROKER)."""
    from dsflow.core import stores

    broker = stores.kinds_that(stores.Capability.BROKER)[0]
    commands = stores.facet(broker, "commands")
    assert commands is not None  # a broker's kind has its commands
    return commands.producer(bootstrap, topic, config, FLUSH_INTERVAL_S)


class _Progress:
    """Calls `report(total)` about every PROGRESS_INTERVAL_S seconds, even while idle."""

    def __init__(self, report: Callable[[int], None] | None):
        self.report = report
        self.total = 0
        self.next_at = time.monotonic() + PROGRESS_INTERVAL_S

    def tick(self) -> None:
        if self.report is not None and time.monotonic() >= self.next_at:
            self.report(self.total)
            self.next_at = time.monotonic() + PROGRESS_INTERVAL_S


def _wait(pacer: _Pacer, sink: Any, progress: _Progress, stop: threading.Event) -> bool:
    """Sleep until the next record is due, in small steps; False if stopped meanwhile."""
    while (delay := pacer.delay()) > 0.001:
        sink.poll(0)
        progress.tick()
        if stop.wait(min(delay, _STEP_S)):
            return False
    return not stop.is_set()


def run(
    bootstrap: str,
    spec: DatagenSpec,
    stop: threading.Event | None = None,
    *,
    config: Mapping[str, str] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Produce spec.count records (or until `stop` is set); returns how many were produced.

    `config` adds producer settings (e.g. security); `on_progress` gets the running total
    about every PROGRESS_INTERVAL_S seconds. Raises DsflowError DSF-E711 on delivery errors.
    """
    generator = build_generator(spec)
    stop = stop or threading.Event()
    rng = random.Random(spec.seed)
    sink = _sink(bootstrap, spec.topic, config)
    pacer = _Pacer(spec.rate)
    progress = _Progress(on_progress)
    seq = spec.start_seq
    while spec.count is None or progress.total < spec.count:
        if not _wait(pacer, sink, progress, stop):
            break
        key, record = generator.make(seq, rng)
        sink.send(key, record)
        seq += 1
        progress.total += 1
        pacer.advance()
        sink.maybe_flush(FINAL_FLUSH_TIMEOUT_S)
        progress.tick()
    sink.flush(FINAL_FLUSH_TIMEOUT_S)
    return progress.total


def _broker_title() -> str:
    from dsflow.core import stores

    return stores.REGISTRY[stores.kinds_that(stores.Capability.BROKER)[0]].title


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dsflow.datagen", description="Produce synthetic records to a topic.")
    p.add_argument("--bootstrap", default=os.environ.get(BOOTSTRAP_ENV),
                   help=f"host:port of the {_broker_title()} broker (default: ${BOOTSTRAP_ENV}, how dsflow apply "
                        "passes it)")
    p.add_argument("--topic", required=True)
    p.add_argument("--generator", default="pageviews", choices=sorted(GENERATORS))
    p.add_argument("--rate", type=float, default=1.0, help="records per second; 0 = as fast as possible")
    p.add_argument("--count", type=int, default=None, help="records to produce; default: until stopped")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start-seq", type=int, default=0, help="first sequence number (id)")
    p.add_argument("--column", action="append", default=[], metavar="NAME:TYPE", help="for --generator columns")
    p.add_argument("--key", action="append", default=[], metavar="COLUMN", help="key column(s) for columns")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE", help="extra producer setting")
    p.add_argument("--progress-file", default=None, help="where to record the next sequence number")
    return p


def _split(items: list[str], sep: str, what: str, parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        left, found, right = item.partition(sep)
        if not found or not left or not right:
            parser.error(f"{what} must look like {'NAME:TYPE' if sep == ':' else 'KEY=VALUE'}, got {item!r}")
        pairs.append((left.strip(), right.strip()))
    return pairs


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: exit 0 when done or stopped by SIGTERM/SIGINT, 1 on errors, 2 on usage errors."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.bootstrap:
        parser.error(f"--bootstrap (or ${BOOTSTRAP_ENV}) is required")
    register(json.loads(os.environ.get(SECRETS_ENV, "[]")))  # hidden from this process's output
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def log(total: int) -> None:
        print(f"datagen {args.topic}: {total} records produced", flush=True)
        if args.progress_file:
            _write_progress(args.progress_file, args.start_seq + total)

    try:
        spec = DatagenSpec(
            topic=args.topic, generator=args.generator, rate=args.rate, count=args.count, seed=args.seed,
            key_columns=tuple(args.key), columns=tuple(_split(args.column, ":", "--column", parser)),
            start_seq=args.start_seq,
        )
        print(f"datagen {args.topic}: started ({args.generator}, rate {args.rate:g}/s)", flush=True)
        config = {**json.loads(os.environ.get(PROPERTIES_ENV, "{}")),
                  **dict(_split(args.property, "=", "--property", parser))}
        total = run(args.bootstrap, spec, stop, config=config, on_progress=log)
    except DsflowError as exc:
        print(str(exc), file=sys.stderr, flush=True)  # scrubbed of secret values (errors.py)
        return 1
    except Exception as exc:  # noqa: BLE001 - a client error: its text may name the broker
        print(scrub(f"datagen {args.topic} failed: {type(exc).__name__}: {exc}"), file=sys.stderr, flush=True)
        return 1
    print(f"datagen {args.topic}: done, {total} records produced", flush=True)
    if args.progress_file:
        _write_progress(args.progress_file, args.start_seq + total)
    return 0


PROPERTIES_ENV = "DSFLOW_DATAGEN_PROPERTIES"
"""JSON object of producer settings, passed through the environment so secrets stay out of `ps`."""
BOOTSTRAP_ENV = "DSFLOW_DATAGEN_BOOTSTRAP"
"""The broker address, passed through the environment (it may come from env_var()): never on the command line."""
SECRETS_ENV = "DSFLOW_DATAGEN_SECRETS"
"""JSON list of the secret values among the above, scrubbed from the generator's output and log."""


def _write_progress(path: str, next_seq: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        json.dump({"next_seq": next_seq}, handle)
    os.replace(tmp, path)


def read_progress(path: str) -> int:
    """The sequence number a restarted generator continues from (0 if it never ran)."""
    try:
        with open(path) as handle:
            return int(json.load(handle)["next_seq"])
    except (OSError, ValueError, KeyError):
        return 0

