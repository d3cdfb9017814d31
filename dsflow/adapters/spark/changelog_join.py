"""A join of two changelogs on Spark (INNER, LEFT, FULL): the result is a changelog whose rows are upserted and
deleted as rows of either side change (sql/changelog_join.py decides its key).

Spark's stream-stream joins only append, so two `transformWithStateInPandas` operators chained in one query
(append mode, state in RocksDB, as adapters/spark/retract.py) do it instead:

    1. keyed by (side, primary key): the state is the row's join key and row, or nothing (streams, sql/keyed_join.py,
       skip it: a record is a row of its own, keyed by its place, never changed). A micro-batch's changes
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

from sqlglot import exp

from dsflow.adapters.spark.changelog_join_state import LEFT, RIGHT, processors
from dsflow.adapters.spark.retract_state import ROCKSDB, STATE_PROVIDER
from dsflow.adapters.spark.spec import ChangelogJoinSpec, ChangelogStepSpec

ALIVE = "__alive"
OUTPUT_KEY = "__okey"
ALIAS = "__cj"
STAGE1_OUTPUT = "jk string, side int, pk string, row string, moved string"
STAGE2_OUTPUT = "okey string, keep boolean, lv string, rv string"


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


def _source_changes(spark, view: str, which: int, keys: list[str], pk: list[str], streams: bool = False):
    """A changelog's records (its source view: columns, __offset, __deleted) as one side's changes; a stream's
    (`streams`: pk its place, __partition and __offset) are rows that are never deleted."""
    from pyspark.sql import functions as F

    frame = spark.table(view)
    row = F.to_json(F.struct(*[F.col(f"`{c}`") for c in frame.columns if not c.startswith("__")]))
    return _changes(frame, which, [F.col(f"`{c}`").cast("string") for c in keys],
                    F.to_json(F.array(*[F.col(f"`{c}`").cast("string") for c in pk])), F.col("__offset"),
                    F.lit(True) if streams else ~F.col("__deleted"), row)


def _rows_changes(frame, aliases: list[str], step: ChangelogStepSpec):
    """The rows so far (a joined view: struct columns `aliases`, __alive, __okey) as the left side's changes of
    the next join: keyed by __okey, which changes at most once a batch (stage 2's guarantee), so the offset
    (__alive) orders nothing; were a key deleted and upserted in one batch, the upsert would win."""
    from pyspark.sql import functions as F

    keys = [F.col(f"`{a}`.`{c}`").cast("string") for a, c in zip(step.left_relations, step.left_keys, strict=False)]
    row = F.to_json(F.struct(*[F.col(f"`{a}`") for a in aliases]))
    return _changes(frame, LEFT, keys, F.col(OUTPUT_KEY), F.col(ALIVE), F.col(ALIVE), row)


def _joined(left, right, side: str, keyed_by_left: bool, streams: bool = False):
    """The two stages over both sides' changes: (okey, keep, lv, rv), one row per changed output key. Streams'
    records are never updated nor moved: they skip stage 1, each one its row's only change."""
    from pyspark.sql import functions as F

    by_row, by_join_key = processors(side, keyed_by_left)
    changes = left.unionByName(right)
    stage1 = changes.select("jk", "side", "pk", "row", F.lit(None).cast("string").alias("moved")) if streams else \
        changes.groupBy("g").transformWithStateInPandas(by_row, STAGE1_OUTPUT, "append", "None")
    return stage1.groupBy("jk").transformWithStateInPandas(by_join_key, STAGE2_OUTPUT, "append", "None")


def joined_view(spark, spec: ChangelogJoinSpec) -> None:
    """Create the view `spec.view`: one struct column per joined changelog (named by its alias, NULL for a missing
    side), __alive (false: a delete of the row's key, with the row's last values) and __okey (the row's output
    key). Each of spec.steps joins the rows of the joins before it with one more changelog."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    spark.conf.set(STATE_PROVIDER, ROCKSDB)  # transformWithState keeps its state in RocksDB only
    joined = _joined(_source_changes(spark, spec.left_view, LEFT, spec.left_keys, spec.left_pk, spec.streams),
                     _source_changes(spark, spec.right_view, RIGHT, spec.right_keys, spec.right_pk, spec.streams),
                     spec.side, spec.keyed_by_left, spec.streams)
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
