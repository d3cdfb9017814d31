"""Model-based change test: random edit sequences over a live project, and a data oracle for every plan.

A small project (a source stream, a stateless copy of it, an aggregation and a tumbling window, each with its own
topic) runs on a real broker with real query drivers. Each step makes one random edit an engineer makes to such a
project (rename the source, move it to another schema, change its event-time column, change a WHERE, add, drop or
retype a column, change partitions, change a window size, delete a query, add it back, revert to an earlier version),
then plans and applies it, produces new records and checks in the data that what happened is what the plan said:

- a plan that destroys records is refused without the acknowledgement, and the refusal touched no record and no
  state; its `DESTROYS ~N` is the count the topic held; with the acknowledgement, the topic is emptied;
- a query the plan keeps (in place, keep checkpoint, carry offsets) neither re-reads nor skips a record: the copy's
  sink holds each expected row exactly as often as the oracle says (a multiset, compared exactly);
- a query the plan replays (or creates) re-reads every source record, as many as its estimate said (± one batch);
  what it wrote before stays in its sink, as the plan says (duplicates in a stream, superseded rows in a changelog);
- the source topic never loses a record (a move keeps it), and aggregation results equal a plain Python reference
  over the records each version read.

    python bench/change_model.py --steps 200 --seed 1        # by hand (docs/benchmarks.md): starts Apache Kafka

tests/e2e/test_change_model.py runs a bounded slice of it in the suite with a fixed seed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

T0 = 1_700_000_000_000
"""Event time of id 0 (epoch ms, a multiple of every window size); id i happens at T0 + 100 ms * i."""
TS2_SHIFT_MS = 7_000
BATCH = 24
"""Records produced after every step."""
PLAN_TIME_REFUSALS = ("DSF-E825",)
"""Errors a plan rightly fails with for an edit of this model: a revert to fewer partitions."""
STALL_S = 300.0
"""A step's check fails when the sinks stop moving towards the oracle for this long (a loaded machine starts drivers
slowly: the wait is for progress, not for a fixed time) ..."""
CATCH_UP_S = 900.0
"""... or when this much time has passed in all."""

CONFIG = "name: {name}\ndefault:\n  database: analytics\n  store: k\nruntime:\n  isolation: {isolation}\n" \
         "environments:\n  dev:\n    vars: {{bootstrap: 'unset:1'}}\n"
STORES = "stores:\n  - name: k\n    type: kafka\n    bootstrap_servers: \"{{ var('bootstrap') }}\"\n" \
         "databases:\n  - name: analytics\n    schemas: [public, raw]\n"


@dataclass(frozen=True)
class Model:
    """The project's editable parameters; `sql` renders them."""

    source: str = "events"
    schema: str = "public"
    time_column: str = "ts"
    filter_mod: int = 3
    copy_columns: tuple[str, ...] = ("id", "grp", "v")
    v_type: str = "BIGINT"
    copy_partitions: int = 1
    copy_present: bool = True
    count_min: int = 0
    counts_key_format: str = "json"
    window_seconds: int = 10
    copy_topic: str = "copied"

    def sql(self, prefix: str) -> str:
        source = f"analytics.{self.schema}.{self.source}"
        columns = ", ".join("CAST(v AS DOUBLE) AS v" if c == "v" and self.v_type == "DOUBLE" else c
                            for c in self.copy_columns)
        text = (f"CREATE STREAM {source} (id BIGINT, grp VARCHAR, v BIGINT, ts BIGINT, ts2 BIGINT) WITH "
                f"('topic' = '{prefix}_events', 'value.format' = 'json', 'topic.partitions' = 2, "
                f"'timestamp' = '{self.time_column}');\n"
                f"CREATE CHANGELOG counts WITH ('topic' = '{prefix}_counts', "
                f"'key.format' = '{self.counts_key_format}') AS SELECT grp, COUNT(*) AS n, "
                f"SUM(v) AS total FROM {source} WHERE v >= {self.count_min} GROUP BY grp;\n"
                f"CREATE CHANGELOG windows WITH ('topic' = '{prefix}_windows', 'watermark.delay' = '1 hour') AS "
                f"SELECT window_start, window_end, COUNT(*) AS n FROM TUMBLE({source}, SIZE {self.window_seconds} "
                f"SECONDS) GROUP BY window_start, window_end;\n")
        if self.copy_present:
            text += (f"CREATE STREAM copied WITH ('topic' = '{prefix}_{self.copy_topic}', 'topic.partitions' = "
                     f"{self.copy_partitions}) AS SELECT {columns} FROM {source} WHERE v % {self.filter_mod} <> 0;\n")
        return text

    # the reference in plain Python: what each version makes of a record

    def copy_row(self, record: dict) -> tuple | None:
        if not self.copy_present or record["v"] % self.filter_mod == 0:
            return None
        row = {c: (float(record[c]) if c == "v" and self.v_type == "DOUBLE" else record[c]) for c in self.copy_columns}
        return tuple(sorted(row.items()))

    def count_rows(self, records: list[dict]) -> Counter:
        """(grp, 'n'|'total') -> contribution of `records` to the aggregation's state."""
        out: Counter = Counter()
        for r in records:
            if r["v"] >= self.count_min:
                out[(r["grp"], "n")] += 1
                out[(r["grp"], "total")] += r["v"]
        return out

    def window_rows(self, records: list[dict]) -> Counter:
        """(window start, window end) (epoch ms) -> records in it."""
        size = self.window_seconds * 1000
        return Counter(((r[self.time_column] // size) * size, (r[self.time_column] // size + 1) * size)
                       for r in records)


def _toggle(values: tuple, current: Any) -> Any:
    return values[(values.index(current) + 1) % len(values)]


EDITS: dict[str, Callable[[Model, random.Random], Model | None]] = {
    "rename source": lambda m, r: replace(m, source=_toggle(("events", "events_raw", "events_v2"), m.source)),
    "move source to another schema": lambda m, r: replace(m, schema=_toggle(("public", "raw"), m.schema)),
    "change the event-time column": lambda m, r: replace(m, time_column=_toggle(("ts", "ts2"), m.time_column)),
    "change a WHERE": lambda m, r: replace(m, filter_mod=r.choice([x for x in (2, 3, 5) if x != m.filter_mod])),
    "add a column": lambda m, r: replace(m, copy_columns=m.copy_columns + ("ts",)) if "ts" not in m.copy_columns
    else None,
    "drop a column": lambda m, r: replace(m, copy_columns=m.copy_columns[:-1]) if len(m.copy_columns) > 2 else None,
    "retype a column": lambda m, r: replace(m, v_type=_toggle(("BIGINT", "DOUBLE"), m.v_type))
    if "v" in m.copy_columns else None,
    "raise partitions": lambda m, r: replace(m, copy_partitions=m.copy_partitions + 1) if m.copy_partitions < 3
    else None,
    "change an aggregation's WHERE": lambda m, r: replace(m, count_min=r.choice([x for x in (0, 20, 50)
                                                                                 if x != m.count_min])),
    "change a window size": lambda m, r: replace(m, window_seconds=r.choice([x for x in (10, 20, 30)
                                                                            if x != m.window_seconds])),
    "change a sink's topic name": lambda m, r: replace(m, copy_topic=_toggle(("copied", "copies"), m.copy_topic)),
    "change a key format": lambda m, r: replace(m, counts_key_format=_toggle(("json", "string"),
                                                                                m.counts_key_format)),
    "delete a query": lambda m, r: replace(m, copy_present=False) if m.copy_present else None,
    "add it back": lambda m, r: replace(m, copy_present=True) if not m.copy_present else None,
}


@dataclass
class Expected:
    """What the sinks must hold, from what the plans said (the oracle's state)."""

    copied: Counter = field(default_factory=Counter)
    counts: Counter = field(default_factory=Counter)
    windows: Counter = field(default_factory=Counter)


@dataclass
class StepReport:
    number: int
    edit: str
    actions: list[str]
    refused: str | None
    """'undone' or 'allowed' when the edit's plan destroyed records (refused first, then undone or acknowledged);
    'plan refused it (DSF-E...)' when planning failed as it should, and the edit was undone"""
    mismatches: list[str]
    seconds: float


@dataclass
class Run:
    """One live project on a broker, driven step by step."""

    broker: str
    workdir: Path
    seed: int
    prefix: str = field(default_factory=lambda: f"cm{uuid.uuid4().hex[:6]}")
    model: Model = field(default_factory=Model)
    history: list[Model] = field(default_factory=list)
    produced: list[dict] = field(default_factory=list)
    expected: Expected = field(default_factory=Expected)
    reports: list[StepReport] = field(default_factory=list)
    isolation: str = "query"
    """runtime.isolation: each query in its own driver, or all in one shared application"""
    supervised: bool = False
    """Each apply starts the runtime supervisor when none runs, as `dsflow apply` does: a query that fails is
    restarted from its checkpoint, as it is for users"""

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.root = self.workdir / self.prefix
        self.root.mkdir(parents=True)
        (self.root / "dsflow.yml").write_text(CONFIG.format(name=self.prefix, isolation=self.isolation))
        (self.root / "stores.yml").write_text(STORES)

    # driving

    def start(self) -> StepReport:
        return self._step(0, "first apply", self.model)

    def random_step(self) -> StepReport:
        number = len(self.reports)
        while True:
            earlier = [m for m in self.history if m != self.model]
            if earlier and self.rng.random() < 0.08:
                return self._step(number, "revert to an earlier version", self.rng.choice(earlier))
            name = self.rng.choice(sorted(EDITS))
            edited = EDITS[name](self.model, self.rng)
            if edited is not None and edited != self.model:
                return self._step(number, name, edited)

    def destroy(self) -> None:
        from dsflow.engine import operations
        from dsflow.core.safety import Allowance

        loaded = operations.load(self._options())
        operations.apply(loaded, operations.plan(loaded, destroy=True), allowance=Allowance(everything=True))
        if self.supervised:
            from dsflow.runtime import control

            control.down(loaded)

    def _options(self):
        from dsflow.engine import operations

        return operations.Options(self.root, None, {"bootstrap": self.broker})

    def _write(self, model: Model) -> None:
        (self.root / "all.sql").write_text(model.sql(self.prefix))

    def _step(self, number: int, edit: str, model: Model) -> StepReport:
        started, mismatches = time.monotonic(), []
        plan, model, refused = self._plan_and_apply(edit, model, mismatches)
        if self.model != model:
            self.history.append(self.model)
        self.model = model
        self._produce()
        mismatches += self._check()
        report = StepReport(number, edit, [f"{c.address} {c.action.value}"
                                           + (f" ({c.category.value})" if c.category else "") for c in plan.actionable],
                            refused, mismatches, time.monotonic() - started)
        self.reports.append(report)
        return report

    def _plan_and_apply(self, edit: str, model: Model, mismatches: list[str]):
        from dsflow.engine import operations
        from dsflow.core.safety import Allowance
        from dsflow.errors import DsflowError

        previous = self.model
        self._write(model)
        loaded = operations.load(self._options())
        try:
            plan = operations.plan(loaded)
        except DsflowError as error:  # an edit the plan refuses outright (fewer partitions): undone
            if error.code not in PLAN_TIME_REFUSALS:
                mismatches.append(f"'{edit}' failed to plan: {error}")
            self._write(previous)
            loaded = operations.load(self._options())
            model, refused = previous, f"plan refused it ({error.code})"
            plan = operations.plan(loaded)
            result = operations.apply(loaded, plan)
            if plan.actionable or not result.ok:
                mismatches.append(f"undoing '{edit}' planned {[c.address for c in plan.actionable]}")
            return plan, model, refused
        allowance, refused = None, None
        if plan.destroying:
            mismatches += self._check_refusal(loaded, plan)
            if self.rng.random() < 0.4:  # the reviewer says no: the edit is undone
                self._write(previous)
                loaded = operations.load(self._options())
                plan, model, refused = operations.plan(loaded), previous, "undone"
                if plan.destroying:
                    mismatches.append(f"undoing '{edit}' still plans to destroy {plan.destroying[0].address}")
                    return plan, model, refused
            else:
                allowance, refused = Allowance(everything=True), "allowed"
        mismatches += self._check_estimates(plan)
        result = operations.apply(loaded, plan, allowance=allowance)
        if not result.ok:
            mismatches.append(f"apply failed: {result.failed}")
        if self.supervised:
            from dsflow.runtime import control

            control.ensure_started(loaded, self._options())
        self._follow(plan, model)
        return plan, model, refused

    # the oracle

    def _check_refusal(self, loaded, plan) -> list[str]:
        """Without the acknowledgement apply refuses, touching no record and no state; DESTROYS ~N is true."""
        from dsflow.engine import operations
        from dsflow.errors import DsflowError

        out = []
        topics = {t: self._values(t) for t in self._topics()}
        serial = loaded.workspace.state_backend().read().serial
        for change in plan.destroying:
            topic = change.destroys.object.rsplit("/", 1)[-1]
            held = len(topics.get(topic, []))
            if change.destroys.records != held:
                out.append(f"{change.address}: plan says DESTROYS ~{change.destroys.records}, the topic holds {held}")
        try:
            operations.apply(loaded, plan)
            out.append("a destroying plan was applied without the acknowledgement")
        except DsflowError as error:
            if error.code not in ("DSF-E822", "DSF-E823"):
                out.append(f"a destroying plan failed with {error.code}, not DSF-E822")
        if {t: self._values(t) for t in self._topics()} != topics:
            out.append("a refused plan changed a topic's records")
        if loaded.workspace.state_backend().read().serial != serial:
            out.append("a refused plan changed the state")
        return out

    def _check_estimates(self, plan) -> list[str]:
        out = []
        for change in plan.changes:
            if change.category is not None and change.category.value == "replay":
                if change.estimate is None:
                    out.append(f"{change.address}: replay without an estimate")
                elif abs(change.estimate.records - len(self.produced)) > BATCH:
                    out.append(f"{change.address}: replay estimate {change.estimate.records}, the source holds "
                               f"{len(self.produced)}")
        return out

    def _follow(self, plan, model: Model) -> None:
        """The oracle's state after the plan, from what the plan says each change does."""
        changes = {c.address: c for c in plan.changes}
        for sink in ("copied", "counts", "windows"):
            change = changes.get(f"relation.analytics.public.{sink}")
            if change is not None and change.destroys is not None:
                setattr(self.expected, sink, Counter())
            change = changes.get(f"query.analytics.public.{sink}")
            if change is None or change.category is None or change.category.value not in ("new", "replay"):
                continue
            if sink == "copied":
                self.expected.copied += self._copy_rows(model, self.produced)
            elif sink == "counts":
                self.expected.counts = model.count_rows(self.produced)
            else:
                self.expected.windows = model.window_rows(self.produced)

    @staticmethod
    def _copy_rows(model: Model, records: list[dict]) -> Counter:
        return Counter(row for row in map(model.copy_row, records) if row is not None)

    def _produce(self) -> None:
        from dsflow.adapters.kafka.client import produce_json_lines

        first = len(self.produced)
        batch = [{"id": i, "grp": f"g{self.rng.randrange(4)}", "v": self.rng.randrange(100),
                  "ts": T0 + 100 * i, "ts2": T0 + 100 * i + TS2_SHIFT_MS} for i in range(first, first + BATCH)]
        produce_json_lines(self.broker, f"{self.prefix}_events", [json.dumps(r) for r in batch])
        self.produced += batch
        self.expected.copied += self._copy_rows(self.model, batch)
        self.expected.counts += self.model.count_rows(batch)
        self.expected.windows += self.model.window_rows(batch)

    def _check(self) -> list[str]:
        started = moved = time.monotonic()
        problems = self._differences()
        while problems and time.monotonic() - moved < STALL_S and time.monotonic() - started < CATCH_UP_S:
            time.sleep(1.0)
            now = self._differences()
            if now != problems:
                moved = time.monotonic()
            problems = now
        return problems

    def _differences(self) -> list[str]:
        out = []
        source = sorted(json.loads(v)["id"] for v in self._values(f"{self.prefix}_events"))
        if source != list(range(len(self.produced))):
            out.append(f"the source topic holds {len(source)} records of {len(self.produced)} produced")
        copied = Counter(tuple(sorted(json.loads(v).items()))
                         for v in self._values(f"{self.prefix}_{self.model.copy_topic}"))
        if copied != self.expected.copied:
            missing, extra = self.expected.copied - copied, copied - self.expected.copied
            out.append(f"copied: {sum(missing.values())} rows missing (ids {_ids(missing)}), "
                       f"{sum(extra.values())} extra (ids {_ids(extra)})")
        counts = _latest(self._records(f"{self.prefix}_counts"))
        got = Counter({(k, f): v[f] for k, v in counts.items() for f in ("n", "total")})
        wrong = {k: (v, got.get(k)) for k, v in self.expected.counts.items() if v and got.get(k) != v}
        if wrong:
            out.append(f"counts differ from the reference: {dict(list(wrong.items())[:4])}")
        windows = {(_epoch_ms(v["window_start"]), _epoch_ms(v["window_end"])): v["n"]
                   for v in _latest(self._records(f"{self.prefix}_windows")).values()}
        wrong = {k: (v, windows.get(k)) for k, v in self.expected.windows.items() if windows.get(k) != v}
        if wrong:
            out.append(f"windows differ from the reference: {dict(list(wrong.items())[:4])}")
        return out

    def _topics(self) -> list[str]:
        return [f"{self.prefix}_{t}" for t in ("events", "copied", "copies", "counts", "windows")]

    def _records(self, topic: str) -> list[dict]:
        from dsflow.adapters.kafka.admin import list_topics
        from dsflow.adapters.kafka.client import read_to_end

        return read_to_end(self.broker, topic) if topic in list_topics(self.broker) else []

    def _values(self, topic: str) -> list[str]:
        return [r["value"] for r in self._records(topic) if r["value"] is not None]


def _latest(records: list[dict]) -> dict[str, dict]:
    latest: dict[str, tuple[int, int, dict | None]] = {}
    for r in records:
        value = json.loads(r["value"]) if r["value"] is not None else None
        latest[r["key"]] = (r["partition"], r["offset"], value)
    return {k: v for k, (_, _, v) in latest.items() if v is not None}


def _epoch_ms(value: Any) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    return int(datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() * 1000)


def _ids(rows: Counter) -> str:
    ids = sorted({dict(row)["id"] for row in rows})
    return ", ".join(map(str, ids[:8])) + (" ..." if len(ids) > 8 else "")


def run_steps(broker: str, workdir: Path, seed: int, steps: int, budget_s: float | None = None,
              on_step: Callable[[StepReport], None] = lambda _: None, min_steps: int = 1,
              isolation: str = "query", supervised: bool = False) -> Run:
    """A run of `steps` random steps after the first apply (fewer once `budget_s` is spent, never fewer than
    `min_steps`), the queries run in `isolation` (runtime.isolation), with the runtime supervisor if `supervised`."""
    run = Run(broker, workdir, seed, isolation=isolation, supervised=supervised)
    started = time.monotonic()
    try:
        on_step(run.start())
        for number in range(1, steps + 1):
            on_step(run.random_step())
            if number >= min_steps and budget_s is not None and time.monotonic() - started > budget_s:
                break
    finally:
        run.destroy()
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--broker", help="bootstrap servers (default: start a broker of --broker-kind)")
    parser.add_argument("--broker-kind", choices=("kafka", "tansu"), default="kafka",
                        help="the broker started when --broker is not given: Apache Kafka (KRaft), or tansu")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dsflow-change-model"))
    parser.add_argument("--budget-minutes", type=float, default=None, help="stop after the step that passes it")
    parser.add_argument("--isolation", choices=("query", "shared"), default="query",
                        help="runtime.isolation: a driver per query, or one shared application")
    parser.add_argument("--no-supervisor", action="store_true",
                        help="apply as the library does, without starting the runtime supervisor `dsflow apply` starts")
    args = parser.parse_args()
    broker, stop = _broker(args.broker, args.workdir, args.broker_kind)
    try:
        def show(report: StepReport) -> None:
            print(json.dumps({"step": report.number, "edit": report.edit, "actions": report.actions,
                              "refused": report.refused,
                              "mismatches": report.mismatches, "seconds": round(report.seconds, 1)}), flush=True)

        budget = args.budget_minutes * 60 if args.budget_minutes else None
        run = run_steps(broker, args.workdir, args.seed, args.steps, budget_s=budget, on_step=show,
                        isolation=args.isolation, supervised=not args.no_supervisor)
    finally:
        stop()
    bad = [r for r in run.reports if r.mismatches]
    print(json.dumps({"seed": args.seed, "steps": len(run.reports) - 1, "records": len(run.produced),
                      "mismatched_steps": len(bad), "edits": Counter(r.edit for r in run.reports)}), flush=True)
    return 1 if bad else 0


def _broker(given: str | None, workdir: Path, kind: str):
    if given:
        return given, lambda: None
    from dsflow.adapters.kafka import devbroker

    run_dir = workdir / f"broker-{uuid.uuid4().hex[:6]}"
    run_dir.mkdir(parents=True)
    return devbroker.start(run_dir, port=devbroker.free_port(), kind=kind).bootstrap, lambda: devbroker.stop(run_dir)


if __name__ == "__main__":
    sys.exit(main())
