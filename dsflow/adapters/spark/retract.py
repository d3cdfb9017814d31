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
       deleting the current extreme finds the next one), MAX_BY and MIN_BY the multiset of (ordering,
       value) pairs (an ordering that is a TIMESTAMP as its epoch microseconds: `_exact_orderings`). Each
       group a batch touched is emitted once: its new row, or a delete (__keep false) when no row is left in
       it; HAVING, applied to that row, turns it into a delete when it stops matching.

An aggregate without GROUP BY (a global aggregate) is the same two stages with one group, `{}` (the record key
GLOBAL_KEY of sql/aggregates.py), and its row is never deleted: when its last source row goes it becomes what
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

from collections.abc import Iterable

from sqlglot import exp

from dsflow.adapters.spark.frames import DELETED, KEEP, KEY, OFFSET
from dsflow.adapters.spark.retract_state import ROCKSDB, STATE_PROVIDER, processors
from dsflow.adapters.spark.spec import RetractSpec
from dsflow.sql.aggregates import GLOBAL_KEY
from dsflow.sql.fields import group_key_sql

PK = "__pk"
STAGE1_OUTPUT = "g string, sign int, a string"
STAGE2_OUTPUT = "g string, keep boolean, r string"
KINDS = {exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max", exp.ArgMax: "max_by", exp.ArgMin: "min_by"}
SPARK_FUNCTION = {"count": "count", "sum": "sum", "avg": "avg", "min": "min", "max": "max"}
BY_KINDS = ("max_by", "min_by")


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
    if isinstance(agg, (exp.ArgMax, exp.ArgMin)):
        return KINDS[type(agg)], _by_input(agg)
    return KINDS[type(agg)], agg.this.copy()


def _by_input(agg: exp.ArgMax | exp.ArgMin) -> exp.Expr:
    """MAX_BY/MIN_BY's input: NAMED_STRUCT('o', ordering, 'v', value), NULL when the ordering is (Spark skips
    those rows; a NULL value is kept, and can be the result)."""
    ordering = agg.expression.copy()
    pair = exp.Anonymous(this="NAMED_STRUCT", expressions=[exp.Literal.string("o"), ordering.copy(),
                                                           exp.Literal.string("v"), agg.this.copy()])
    return exp.If(this=exp.Is(this=ordering, expression=exp.Null()), true=exp.Null(), false=pair)


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




def retracted_view(spark, spec: RetractSpec, changes) -> None:
    """Create the view `spec.view` (__g<j>, __r<i>, __keep) from the per-change rows `changes` (select_sql)."""
    from pyspark.sql import functions as F

    groups = [f"__g{j}" for j in range(spec.groups)]
    inputs = [f"__a{i}" for i in range(len(spec.aggregates))]
    group_ddl = _ddl(changes, groups)
    result_ddl = ", ".join(f"`__r{i}` {_result_type(changes, kind, i)}" for i, kind in enumerate(spec.aggregates))

    def as_json(columns: list[str]):
        return F.to_json(F.struct(*[F.col(f"`{c}`") for c in columns])) if columns else F.lit("{}")

    changes = _exact_orderings(changes, spec.aggregates)
    spark.conf.set(STATE_PROVIDER, ROCKSDB)  # transformWithState keeps its state in RocksDB only
    by_key, by_group = processors(spec.aggregates, global_=not groups)
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
    if kind in BY_KINDS:
        column = f"`__a{index}`"
        return frame.selectExpr(f"{kind}({column}.v, {column}.o) AS r").schema.fields[0].dataType.simpleString()
    return frame.selectExpr(f"{SPARK_FUNCTION[kind]}(`__a{index}`) AS r").schema.fields[0].dataType.simpleString()


def _exact_orderings(changes, kinds: list[str]):
    """`changes` with each MAX_BY/MIN_BY ordering that is a TIMESTAMP as its epoch microseconds: stage 2 compares
    the JSON of the pairs, and JSON keeps a TIMESTAMP to the millisecond only."""
    from pyspark.sql import functions as F

    for index, kind in enumerate(kinds):
        column = f"__a{index}"
        ordering = changes.schema[column].dataType["o"].dataType if kind in BY_KINDS else None
        if ordering is not None and ordering.typeName() in ("timestamp", "timestamp_ntz"):
            pair = F.struct(F.unix_micros(F.col(f"`{column}`.o").cast("timestamp")).alias("o"),
                            F.col(f"`{column}`.v").alias("v"))
            changes = changes.withColumn(column, F.when(F.col(f"`{column}`").isNull(), None).otherwise(pair))
    return changes
