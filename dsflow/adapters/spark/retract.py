"""GROUP BY over a changelog on Spark, with retractions: the result is a changelog whose rows are updated as
source rows are upserted and deleted, and deleted (a tombstone) when their group becomes empty.

Spark's own streaming aggregation only adds rows, so an update would be counted again and a delete never
leave its group. Two `transformWithStateInPandas` operators chained in one query (append mode; Spark refuses
two `applyInPandasWithState` in one query, and transformWithState keeps its state in RocksDB only, so the
query's state store is RocksDB) do it instead:

    1. keyed by the source's primary key: the state is the key's last row as the aggregation sees it (its group
       and the inputs of its aggregates), or nothing. A micro-batch's changes of a key (in offset order; one key
       lives in one partition) end in a new row or a delete (a tombstone, or a row WHERE no longer keeps); if it
       differs from the state, the stage emits (old group, -1, old inputs) and (new group, +1, new inputs).
    2. keyed by the group: the state is the group's row count and, per aggregate, what retracting a row needs:
       COUNT a count, SUM and AVG a sum and a count, MIN, MAX and COUNT(DISTINCT) the multiset of values (so
       deleting the current extreme finds the next one). Each group a batch touched is emitted once: its new
       row, or a delete (__keep false) when no row is left in it; HAVING, applied to that row, turns it into a
       delete when it stops matching.

An aggregate without GROUP BY (a global aggregate) is the same two stages with one group, `{}` (the record key
GLOBAL_KEY of load/aggregates.py), and its row is never deleted: when its last source row goes it becomes what
SQL gives over an empty table (COUNT 0, the others NULL). Stage 1 touches the group (sign 0, `TOUCH`) for every
key a batch read even when nothing changed, so a batch whose rows WHERE drops still emits that row. Before the
first source record there is no row (a streaming query emits nothing without input).

One operator keyed by the group could not work: an update that moves a key to another group must retract it
from the old group, which only the key's own state knows; the second stage is keyed by what the first emits.
Both states live in the checkpoint, so a driver killed with -9 resumes from the last committed batch: the
batch is recomputed from the same state and its records written again (upserts of the same values).

The SQL side (`rewrite`) is pure sqlglot: the query's SELECT becomes the per-change rows of stage 1 and the
projections over the stage 2 view. SUM/AVG of floating-point values are kept as a running sum, so a retraction
can leave a rounding error of the last bits; MIN/MAX of text compare as Python strings (code points).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlglot import exp

from dsflow.adapters.spark.frames import DELETED, KEEP, KEY, OFFSET
from dsflow.adapters.spark.spec import RetractSpec
from dsflow.load.aggregates import GLOBAL_KEY
from dsflow.load.fields import group_key_sql

PK = "__pk"
STAGE1_OUTPUT, STAGE1_STATE = "g string, sign int, a string", "g string, a string"
STAGE2_OUTPUT, STAGE2_STATE = "g string, keep boolean, r string", "acc string"
KINDS = {exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}
SPARK_FUNCTION = {"count": "count", "sum": "sum", "avg": "avg", "min": "min", "max": "max"}
MULTISETS = ("min", "max", "count_distinct")
TOUCH = (GLOBAL_KEY, 0, "{}")
"""Stage 1's change of a global aggregate's group when a key's batch changed nothing: emit the row anyway."""


# --- SQL: the query's SELECT split around the two stages ------------------------------------------------------


def changelog_source(alias: str, primary_key: Iterable[str]) -> tuple[exp.Expr, exp.Expr, exp.Expr]:
    """What stage 1 reads of a changelog's view `alias`: (its row's key, its offset, whether the row is alive)."""
    key = exp.func("TO_JSON", exp.func("ARRAY", *[exp.cast(exp.column(k, table=alias), "STRING")
                                                   for k in primary_key]))
    return key, exp.column(OFFSET, table=alias), exp.not_(exp.column(DELETED, table=alias))


def rewrite(select: exp.Select, source: tuple[exp.Expr, exp.Expr, exp.Expr],
            view: str) -> tuple[str, RetractSpec]:
    """(the per-change SELECT over the source view, the spec of the stages and of the projections over `view`).
    `select` is the query's SELECT in Spark names, its source already replaced by its view (translate.py);
    `source` is what stage 1 reads of that view (`changelog_source`, or a changelog join's)."""
    group = select.args.get("group")
    groups = list(group.expressions) if group is not None else []  # none: a global aggregate, one group
    having = select.args.get("having")
    found: dict[str, tuple[int, str, exp.Expr]] = {}
    for node in [*select.selects, *([having] if having else [])]:
        for agg in node.find_all(exp.AggFunc):
            key = agg.sql(dialect="spark")
            if key not in found:
                found[key] = (len(found), *_kind(agg))
    pre = _per_change(select, source, groups, [arg for _, _, arg in found.values()])
    indexes = {group_key_sql(g): i for i, g in enumerate(groups)}

    def outer(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.AggFunc):
            return exp.column(f"__r{found[node.sql(dialect='spark')][0]}")
        if not isinstance(node, exp.Alias) and group_key_sql(node) in indexes:
            return exp.column(f"__g{indexes[group_key_sql(node)]}")
        return node

    projections = [p.copy().transform(outer) for p in select.selects]
    if not groups:  # the one row's record key (the sink has no key columns)
        projections.append(exp.Literal.string(GLOBAL_KEY).as_(KEY))
    keep: exp.Expr = exp.column(KEEP)
    if having is not None:
        keep = exp.and_(keep, exp.func("COALESCE", exp.paren(having.this.copy().transform(outer)), exp.false()))
    post = exp.select(*projections, keep.as_(KEEP)).from_(exp.to_identifier(view))
    spec = RetractSpec(view=view, groups=len(groups), aggregates=[kind for _, kind, _ in found.values()],
                       post_sql=post.sql(dialect="spark"))
    return pre.sql(dialect="spark"), spec


def _kind(agg: exp.AggFunc) -> tuple[str, exp.Expr]:
    """(the aggregate's kind, its argument); COUNT(*) counts rows and takes none."""
    if isinstance(agg, exp.Count):
        if isinstance(agg.this, exp.Star) or agg.this is None:
            return "count_star", exp.true()
        if isinstance(agg.this, exp.Distinct):
            return "count_distinct", agg.this.expressions[0].copy()
        return "count", agg.this.copy()
    return KINDS[type(agg)], agg.this.copy()


def _per_change(select: exp.Select, source: tuple[exp.Expr, exp.Expr, exp.Expr], groups: list[exp.Expr],
                arguments: list[exp.Expr]) -> exp.Select:
    """One row per source change: its key, offset, whether the aggregation keeps it (WHERE, not a tombstone),
    its group (__g<j>) and the arguments of the aggregates (__a<i>)."""
    key, offset, keep = (node.copy() for node in source)
    where = select.args.get("where")
    if where is not None:
        keep = exp.and_(exp.func("COALESCE", exp.paren(where.this.copy()), exp.false()), keep)
    items = [key.as_(PK), offset.as_(OFFSET), keep.as_(KEEP),
             *[g.copy().as_(f"__g{j}") for j, g in enumerate(groups)],
             *[a.as_(f"__a{i}") for i, a in enumerate(arguments)]]
    return exp.select(*items).from_(select.args["from_"].this.copy())


# --- stage 1: per source key, the change of its row as (-old, +new) -------------------------------------------


def key_changes(old: list | None, rows: Iterable[tuple], touch: bool = False) -> tuple[list | None, list[tuple]]:
    """One key's micro-batch: rows of (offset, keep, group JSON, inputs JSON) -> (the key's new state
    [group, inputs] or None, the changes (group, sign, inputs) to apply to the groups). `touch` (a global
    aggregate): a batch that changes nothing gives TOUCH, so the one row is emitted."""
    last = max(rows, key=lambda r: r[0], default=None)
    if last is None:
        return old, []
    new = [last[2], last[3]] if last[1] else None
    if new == old:
        return old, [TOUCH] if touch else []
    out = [(old[0], -1, old[1])] if old is not None else []
    if new is not None:
        out.append((new[0], 1, new[1]))
    return new, out


# --- stage 2: per group, the aggregates' state and the group's row ---------------------------------------------


def empty_accumulator(kinds: list[str]) -> dict:
    return {"n": 0, "v": [{} if kind in MULTISETS else [0, 0] for kind in kinds]}


def apply_changes(acc: dict, kinds: list[str], changes: Iterable[tuple[int, dict]]) -> dict:
    """Add (+1) or retract (-1) rows' aggregate inputs ({__a<i>: value}, nulls absent) to a group's state."""
    for sign, inputs in changes:
        acc["n"] += sign
        for index, kind in enumerate(kinds):
            value = inputs.get(f"__a{index}")
            if value is None or kind == "count_star":
                continue
            slot = acc["v"][index]
            if kind in MULTISETS:
                text = json.dumps(value)
                slot[text] = slot.get(text, 0) + sign
                if slot[text] == 0:
                    del slot[text]
            else:
                slot[0] += sign * value if kind in ("sum", "avg") else 0
                slot[1] += sign
    return acc


def group_row(acc: dict, kinds: list[str], existed: bool, global_: bool) -> tuple[dict | None, tuple | None]:
    """A group's state after a batch -> (the state to keep or None, the row to emit (keep, results) or None).
    A group left without rows is deleted (keep false), except a global aggregate's: it becomes SQL's answer over
    an empty table (COUNT 0, the others NULL), and is kept."""
    if acc["n"] > 0 or global_:
        return acc, (True, results(acc, kinds))
    return None, (False, None) if existed else None


def results(acc: dict, kinds: list[str]) -> dict[str, Any]:
    """The group's aggregates {__r<i>: value} from its state (None where no non-null value is left)."""
    out: dict[str, Any] = {}
    for index, kind in enumerate(kinds):
        slot = acc["v"][index]
        if kind == "count_star":
            value: Any = acc["n"]
        elif kind == "count_distinct":
            value = len(slot)
        elif kind in ("min", "max"):
            values = [json.loads(t) for t in slot]
            value = (min if kind == "min" else max)(values) if values else None
        elif kind == "count":
            value = slot[1]
        else:
            value = None if slot[1] == 0 else slot[0] if kind == "sum" else slot[0] / slot[1]
        out[f"__r{index}"] = value
    return out


# --- Spark: the two operators and the view -------------------------------------------------------------------


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"


def _processors(kinds: list[str], global_: bool) -> tuple[Any, Any]:
    """The two StatefulProcessors (classes made here: pyspark is imported only by a driver that needs them)."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class ByKey(StatefulProcessor):
        """Stage 1: keyed by the source's primary key; its state is the key's last row [group, inputs]."""

        def init(self, handle) -> None:
            self.last = handle.getValueState("last", STAGE1_STATE)

        def handleInputRows(self, key, rows, timerValues):
            found = [(int(o), bool(k), g, a) for frame in rows  # by position: (__pk,) __offset, __keep, g, a
                     for o, k, g, a in zip(*(frame.iloc[:, i] for i in range(-4, 0)), strict=True)]
            old = list(self.last.get()) if self.last.exists() else None
            new, out = key_changes(old, found, touch=global_)
            if new is None and old is not None:
                self.last.clear()
            elif new is not None and new != old:
                self.last.update(tuple(new))
            yield pd.DataFrame(out, columns=["g", "sign", "a"]).astype({"sign": "int32"})

        def close(self) -> None:
            pass

    class ByGroup(StatefulProcessor):
        """Stage 2: keyed by the group; its state is the accumulator of its aggregates (JSON)."""

        def init(self, handle) -> None:
            self.acc = handle.getValueState("acc", STAGE2_STATE)

        def handleInputRows(self, key, rows, timerValues):
            existed = self.acc.exists()
            acc = json.loads(self.acc.get()[0]) if existed else empty_accumulator(kinds)
            changes = ((int(s), json.loads(a)) for frame in rows  # by position: (g,) sign, a
                       for s, a in zip(frame.iloc[:, -2], frame.iloc[:, -1], strict=True))
            kept, row = group_row(apply_changes(acc, kinds, changes), kinds, existed, global_)
            if kept is not None:
                self.acc.update((json.dumps(kept),))
            elif existed:
                self.acc.clear()
            out = [] if row is None else [(key[0], row[0], None if row[1] is None else json.dumps(row[1]))]
            yield pd.DataFrame(out, columns=["g", "keep", "r"]).astype({"keep": bool})

        def close(self) -> None:
            pass

    return ByKey(), ByGroup()


def retracted_view(spark, spec: RetractSpec, changes) -> None:
    """Create the view `spec.view` (__g<j>, __r<i>, __keep) from the per-change rows `changes` (select_sql)."""
    from pyspark.sql import functions as F

    groups = [f"__g{j}" for j in range(spec.groups)]
    inputs = [f"__a{i}" for i in range(len(spec.aggregates))]
    group_ddl = _ddl(changes, groups)
    result_ddl = ", ".join(f"`__r{i}` {_result_type(changes, kind, i)}" for i, kind in enumerate(spec.aggregates))

    def as_json(columns: list[str]):
        return F.to_json(F.struct(*[F.col(f"`{c}`") for c in columns])) if columns else F.lit("{}")

    spark.conf.set(STATE_PROVIDER, ROCKSDB)  # transformWithState keeps its state in RocksDB only
    by_key, by_group = _processors(spec.aggregates, global_=not groups)
    rows = changes.select(PK, OFFSET, KEEP, as_json(groups).alias("g"), as_json(inputs).alias("a"))
    stage1 = rows.groupBy(PK).transformWithStateInPandas(by_key, STAGE1_OUTPUT, "append", "None")
    stage2 = stage1.groupBy("g").transformWithStateInPandas(by_group, STAGE2_OUTPUT, "append", "None")
    parsed = [F.col("keep").alias(KEEP)]
    if group_ddl:
        parsed.append(F.from_json("g", group_ddl).alias("__gs"))
    if result_ddl:
        parsed.append(F.from_json("r", result_ddl).alias("__rs"))
    expanded = [*(["__gs.*"] if group_ddl else []), *(["__rs.*"] if result_ddl else []), KEEP]
    view = stage2.select(*parsed).select(*expanded)
    view.createOrReplaceTempView(spec.view)


def _ddl(frame, columns: list[str]) -> str:
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    return ", ".join(f"`{c}` {types[c]}" for c in columns)


def _result_type(frame, kind: str, index: int) -> str:
    """Spark's own result type of the aggregate over the input column (asked of the analyzer, not run)."""
    if kind in ("count_star", "count_distinct", "count"):
        return "bigint"
    return frame.selectExpr(f"{SPARK_FUNCTION[kind]}(`__a{index}`) AS r").schema.fields[0].dataType.simpleString()
