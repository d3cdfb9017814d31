"""A join of two changelogs on Spark (INNER, LEFT, FULL): the result is a changelog whose rows are upserted and
deleted as rows of either side change (load/changelog_join.py decides its key).

Spark's stream-stream joins only append, so two `transformWithStateInPandas` operators chained in one query
(append mode, state in RocksDB, as adapters/spark/retract.py) do it instead:

    1. keyed by (side, primary key): the state is the row's join key and row, or nothing. A micro-batch's changes
       of a row (offset order) end in a new row or a delete; if it differs from the state, the stage emits the
       change to the row's join key, and a delete to its old join key when the join columns changed (a foreign
       key moved: `moved`, the new join key, sent to both groups), so the old group forgets it.
    2. keyed by the join key (JSON of the ON columns of either side; a row with a NULL join column is alone in a
       group of its own: NULL matches nothing): the state is the current rows of each side by primary key. The
       group's output rows are every left row joined with every right row, plus (LEFT, FULL) each left row with
       NULLs when the group has no right row, and (FULL) each right row with NULLs when it has no left row. The
       stage emits the difference between the outputs before and after the batch, by output key: an upsert of
       each new or changed row, a delete (the old row, __alive false) of each row gone.

One group decides each output key in a batch: an output key lives in the group of the rows that make it (one
group at a time), so only its group before the batch and its group after may change it, and they differ only
when all of its rows moved to one new join key. Then the old group leaves it to the new one (it knows where its
rows went: `moved`), which upserts it, or deletes it when it makes no such row (a moved row's lone output key,
keyed by the left: its key; else its NULL-padded row's). So no output key changes in two groups (two tasks, whose
writes would race) in one batch.

An output key is the left row's primary key when the join is keyed by the left's (ON covers the right's whole
primary key, INNER or LEFT: each left row has at most one output row), else [left key, right key] with null for a
missing side.

More changelogs joined after the first two (a left-deep chain, ChangelogJoinSpec.steps) each add the same two
stages, whose left side is the rows of the stages before: a row's primary key is its output key, it is deleted when
not __alive, its row is the JSON of the struct columns joined so far and its join key reads fields of them. Its
offset is __alive (1 or 0): an output key changes at most once a batch, so there is nothing to order (were it
written twice, the upsert would win).

All states live in the checkpoint: a driver killed with -9 resumes from the last committed batch. A checkpoint
made before `moved` carried the new join key (a boolean then; its states are the same) resumes as it is: stage 1's
output is not kept between batches, and the plan does not replace the query.

Join columns are compared as text (CAST AS STRING): equal values of different numeric types (1 and 1.0) do not
match.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, cast

from sqlglot import exp

from dsflow.adapters.spark.retract import ROCKSDB, STATE_PROVIDER
from dsflow.adapters.spark.spec import ChangelogJoinSpec, ChangelogStepSpec

LEFT, RIGHT = 0, 1
ALIVE = "__alive"
OUTPUT_KEY = "__okey"
ALIAS = "__cj"
STAGE1_OUTPUT, STAGE1_STATE = "jk string, side int, pk string, row string, moved string", "jk string, row string"
STAGE2_OUTPUT, STAGE2_STATE = "okey string, keep boolean, lv string, rv string", "rows string"


# --- SQL and spec ----------------------------------------------------------------------------------------------


def view_name(fqn: str) -> str:
    return f"__cjoin_{fqn.replace('.', '_')}"


def joined_select(select: exp.Select, view: str) -> None:
    """The query's SELECT (over the source views) made to read the joined view instead: FROM the view, no JOIN,
    and WHERE turned into __keep (a joined row WHERE drops, or a deleted one, becomes a delete of its key)."""
    select.set("joins", None)
    select.set("from_", exp.From(this=exp.Table(this=exp.to_identifier(view),
                                                alias=exp.TableAlias(this=exp.to_identifier(ALIAS)))))
    keep: exp.Expr = exp.column(ALIVE, table=ALIAS)
    where = select.args.get("where")
    if where is not None:
        keep = exp.and_(exp.func("COALESCE", exp.paren(where.this), exp.false()), keep)
    select.set("where", None)
    select.select(keep.as_("__keep"), copy=False)


def aggregated_source(select: exp.Select, view: str) -> tuple[exp.Expr, exp.Expr, exp.Expr]:
    """A GROUP BY over the join in the same query (adapters/spark/retract.py reads the joined view as it reads a
    changelog): the SELECT made to read the view, and (the row's output key, its offset, whether it is alive).
    Stage 2 changes an output key at most once a batch, so every row of a batch has offset 0."""
    select.set("joins", None)
    select.set("from_", exp.From(this=exp.Table(this=exp.to_identifier(view),
                                                alias=exp.TableAlias(this=exp.to_identifier(ALIAS)))))
    return (exp.column(OUTPUT_KEY, table=ALIAS), exp.cast(exp.Literal.number(0), "BIGINT"),
            exp.column(ALIVE, table=ALIAS))


# --- stage 1: per (side, primary key), the row's change as a change of its join key's group -------------------


def row_changes(old: list | None, rows: Iterable[tuple]) -> tuple[list | None, list[tuple]]:
    """One row's micro-batch: rows of (offset, join key, row JSON or None) -> (new state [join key, row] or None,
    the changes (join key, row or None, moved) for the groups; moved: the new join key of a row that left one group
    for another (on both its changes), else None)."""
    last = max(rows, key=lambda r: r[0], default=None)
    if last is None:
        return old, []
    new = [last[1], last[2]] if last[2] is not None else None
    if new == old:
        return old, []
    moved = new[0] if old is not None and new is not None and new[0] != old[0] else None
    out = []
    if old is not None and (new is None or moved):
        out.append((old[0], None, moved))
    if new is not None:
        out.append((new[0], new[1], moved))
    return new, out


# --- stage 2: per join key, the rows of both sides and the output rows they make --------------------------------


def outputs(rows: dict, side: str, keyed_by_left: bool) -> dict[str, tuple]:
    """{output key: (left row, right row)} of one group's rows {"l": {pk: row}, "r": {pk: row}}."""
    lefts, rights = rows["l"], rows["r"]
    out: dict[str, tuple] = {}

    def put(lpk, lv, rpk, rv) -> None:
        out[output_key(lpk, rpk, keyed_by_left)] = (lv, rv)

    for lpk, lv in lefts.items():
        for rpk, rv in rights.items():
            put(lpk, lv, rpk, rv)
        if not rights and side in ("left", "full"):
            put(lpk, lv, None, None)
    if not lefts and side == "full":
        for rpk, rv in rights.items():
            put(None, None, rpk, rv)
    return out


def output_key(lpk: str | None, rpk: str | None, keyed_by_left: bool) -> str:
    # keyed by the left only for INNER and LEFT joins (load/changelog_join.py): every output has a left row
    return cast(str, lpk) if keyed_by_left else json.dumps([lpk, rpk])


def _alone(which: int, pk: str, keyed_by_left: bool) -> str | None:
    """The output key a row's group may change on its own, without the other side: the one a moved row takes
    from its old group to its new one (keyed by the left: the left row's key; else its NULL-padded row's)."""
    if keyed_by_left:
        return pk if which == LEFT else None
    return output_key(pk, None, False) if which == LEFT else output_key(None, pk, False)


def _makers(okey: str, keyed_by_left: bool) -> list[tuple[int, str]]:
    """The rows (side, pk) whose group holds an output key: keyed by the left, the left row (its right row, if
    any, is in the same group); else the row of each side the key names."""
    if keyed_by_left:
        return [(LEFT, okey)]
    lpk, rpk = json.loads(okey)
    return [(which, pk) for which, pk in ((LEFT, lpk), (RIGHT, rpk)) if pk is not None]


def _left_to(okey: str, went: dict, keyed_by_left: bool) -> bool:
    """Whether every row making `okey` left this group for one same new join key, which then decides it."""
    to = {went.get(maker) for maker in _makers(okey, keyed_by_left)}
    return len(to) == 1 and None not in to


def group_changes(rows: dict, changes: Iterable[tuple], side: str,
                  keyed_by_left: bool) -> tuple[dict, list[tuple]]:
    """Apply (side, pk, row or None, moved) to a group's rows -> (new rows, (output key, keep, left row, right row)
    of every output row that appeared, changed (keep) or disappeared (not keep, with its old values)).

    An output key whose rows all moved to one new join key is left by its old group to the new one, which upserts
    it, or deletes it when it makes no such row (a moved row's lone output key). So no output key changes in two
    groups (two tasks, whose writes would race) in one batch."""
    before = outputs(rows, side, keyed_by_left)
    rows = {"l": dict(rows["l"]), "r": dict(rows["r"])}
    went, came = {}, []
    for which, pk, row, moved in changes:
        slot = rows["l" if which == LEFT else "r"]
        if row is None:
            slot.pop(pk, None)
        else:
            slot[pk] = row
        alone = _alone(which, pk, keyed_by_left) if moved else None
        if moved and row is None:
            went[(which, pk)] = moved
        elif alone is not None:
            came.append((alone, which, row))
    after = outputs(rows, side, keyed_by_left)
    out = [(k, False, *old) for k, old in before.items() if k not in after and not _left_to(k, went, keyed_by_left)]
    out += [(k, True, *new) for k, new in after.items() if before.get(k) != new]
    out += [(k, False, *((row, None) if which == LEFT else (None, row))) for k, which, row in came if k not in after]
    return rows, out


# --- Spark ----------------------------------------------------------------------------------------------------


def _none(value: Any) -> Any:
    """pandas gives NaN/None for nulls."""
    return None if value is None or value != value else value


def _processors(side: str, keyed_by_left: bool) -> tuple[Any, Any]:
    """The two StatefulProcessors (made here: pyspark is imported only by a driver that needs them)."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class ByRow(StatefulProcessor):
        """Stage 1: keyed by (side, primary key); its state is the row's [join key, row]."""

        def init(self, handle) -> None:
            self.last = handle.getValueState("last", STAGE1_STATE)

        def handleInputRows(self, key, rows, timerValues):
            frames = [f for f in rows if len(f)]
            if not frames:
                return
            found = [(int(o), j, _none(r)) for f in frames
                     for o, j, r in zip(f["offset"], f["jk"], f["row"], strict=True)]
            which, pk = int(frames[0]["side"].iloc[0]), frames[0]["pk"].iloc[0]
            old = list(self.last.get()) if self.last.exists() else None
            new, out = row_changes(old, found)
            if new is None and old is not None:
                self.last.clear()
            elif new is not None and new != old:
                self.last.update(tuple(new))
            frame = pd.DataFrame([(j, which, pk, r, m) for j, r, m in out], dtype=object,
                                 columns=["jk", "side", "pk", "row", "moved"])
            yield frame.astype({"side": "int32"})

        def close(self) -> None:
            pass

    class ByJoinKey(StatefulProcessor):
        """Stage 2: keyed by the join key; its state is the rows of both sides (JSON)."""

        def init(self, handle) -> None:
            self.rows = handle.getValueState("rows", STAGE2_STATE)

        def handleInputRows(self, key, rows, timerValues):
            state = json.loads(self.rows.get()[0]) if self.rows.exists() else {"l": {}, "r": {}}
            changes = [(int(s), p, _none(r), _none(m)) for f in rows
                       for s, p, r, m in zip(f["side"], f["pk"], f["row"], f["moved"], strict=True)]
            state, out = group_changes(state, changes, side, keyed_by_left)
            if state["l"] or state["r"]:
                self.rows.update((json.dumps(state),))
            elif self.rows.exists():
                self.rows.clear()
            yield pd.DataFrame(out, columns=["okey", "keep", "lv", "rv"], dtype=object).astype({"keep": bool})

        def close(self) -> None:
            pass

    return ByRow(), ByJoinKey()


def _changes(frame, which: int, keys: list, pk_json, offset, alive, row):
    """One side's records as (g, side, pk, jk, offset, row): g keys stage 1; a NULL join column (of `keys`, as
    text) gives the row a join key of its own; `row` is NULL unless `alive`."""
    from pyspark.sql import functions as F

    any_null = F.lit(False)
    for column in keys:
        any_null = any_null | column.isNull()
    jk = F.when(any_null, F.concat(F.lit(f"~{which}"), pk_json)).otherwise(F.to_json(F.array(*keys)))
    return frame.select(F.concat(F.lit(f"{which}"), pk_json).alias("g"), F.lit(which).alias("side"),
                        pk_json.alias("pk"), jk.alias("jk"), offset.cast("long").alias("offset"),
                        F.when(alive, row).alias("row"))


def _source_changes(spark, view: str, which: int, keys: list[str], pk: list[str]):
    """A changelog's records (its source view: columns, __offset, __deleted) as one side's changes."""
    from pyspark.sql import functions as F

    frame = spark.table(view)
    row = F.to_json(F.struct(*[F.col(f"`{c}`") for c in frame.columns if not c.startswith("__")]))
    return _changes(frame, which, [F.col(f"`{c}`").cast("string") for c in keys],
                    F.to_json(F.array(*[F.col(f"`{c}`").cast("string") for c in pk])), F.col("__offset"),
                    ~F.col("__deleted"), row)


def _rows_changes(frame, aliases: list[str], step: ChangelogStepSpec):
    """The rows so far (a joined view: struct columns `aliases`, __alive, __okey) as the left side's changes of
    the next join: keyed by __okey, which changes at most once a batch (stage 2's guarantee), so the offset
    (__alive) orders nothing; were a key deleted and upserted in one batch, the upsert would win."""
    from pyspark.sql import functions as F

    keys = [F.col(f"`{a}`.`{c}`").cast("string") for a, c in zip(step.left_relations, step.left_keys, strict=False)]
    row = F.to_json(F.struct(*[F.col(f"`{a}`") for a in aliases]))
    return _changes(frame, LEFT, keys, F.col(OUTPUT_KEY), F.col(ALIVE), F.col(ALIVE), row)


def _joined(left, right, side: str, keyed_by_left: bool):
    """The two stages over both sides' changes: (okey, keep, lv, rv), one row per changed output key."""
    by_row, by_join_key = _processors(side, keyed_by_left)
    stage1 = left.unionByName(right).groupBy("g").transformWithStateInPandas(by_row, STAGE1_OUTPUT, "append", "None")
    return stage1.groupBy("jk").transformWithStateInPandas(by_join_key, STAGE2_OUTPUT, "append", "None")


def joined_view(spark, spec: ChangelogJoinSpec) -> None:
    """Create the view `spec.view`: one struct column per joined changelog (named by its alias, NULL for a missing
    side), __alive (false: a delete of the row's key, with the row's last values) and __okey (the row's output
    key). Each of spec.steps joins the rows of the joins before it with one more changelog."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    spark.conf.set(STATE_PROVIDER, ROCKSDB)  # transformWithState keeps its state in RocksDB only
    joined = _joined(_source_changes(spark, spec.left_view, LEFT, spec.left_keys, spec.left_pk),
                     _source_changes(spark, spec.right_view, RIGHT, spec.right_keys, spec.right_pk),
                     spec.side, spec.keyed_by_left)
    frame = joined.select(F.from_json("lv", spec.left_ddl).alias(spec.left_alias),
                          F.from_json("rv", spec.right_ddl).alias(spec.right_alias), F.col("keep").alias(ALIVE),
                          F.col("okey").alias(OUTPUT_KEY))
    aliases = [spec.left_alias, spec.right_alias]
    for step in spec.steps:
        rows = StructType([frame.schema[a] for a in aliases])
        joined = _joined(_rows_changes(frame, aliases, step),
                         _source_changes(spark, step.right_view, RIGHT, step.right_keys, step.right_pk),
                         step.side, step.keyed_by_left)
        frame = joined.select(*[F.from_json("lv", rows)[a].alias(a) for a in aliases],
                              F.from_json("rv", step.right_ddl).alias(step.right_alias), F.col("keep").alias(ALIVE),
                              F.col("okey").alias(OUTPUT_KEY))
        aliases.append(step.right_alias)
    frame.createOrReplaceTempView(spec.view)
