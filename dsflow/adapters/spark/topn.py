"""ROW_NUMBER top-N and deduplication per key on Spark (sql/topn.py recognises the SQL): the result is a changelog
keyed by the partition columns (N = 1) or by them and the rank (N > 1), whose rank rows are replaced as rows
arrive, and deleted when a rank is left without a row.

Spark Structured Streaming has no ROW_NUMBER over a stream ("non-time-based windows are not supported"), so
`transformWithStateInPandas` operators do it (append mode, state in RocksDB, as adapters/spark/retract.py):

    a stream     one operator keyed by the partition key; its state is the key's top N rows. A micro-batch's records
                 of the key are ranked with them (topn_state.py: by the ORDER BY, ties by source partition and
                 offset), and each rank whose row changed is emitted, an upsert of (key, rank). Rows only arrive,
                 so no rank disappears.
    a changelog  two: keyed by the row's primary key (its state: the row's partition key and row), which turns a
                 batch's changes of the row (offset order; a tombstone, or a row WHERE no longer keeps, is a
                 delete) into a delete from its old partition key and an upsert into its new one; then keyed by the
                 partition key (its state: every row of the key), which ranks the key's rows before and after and
                 emits each rank whose row changed, or a delete (__keep false: a tombstone) of a rank left without
                 a row. Ties by the primary key's values as text. A (key, rank) changes in its key's group only, so
                 no two tasks write it in one batch.

The states live in the checkpoint: a driver killed with -9 resumes from the last committed batch, and the batch is
ranked again from the same state (its records written again, the same upserts).

Rows go through the state as JSON; TIMESTAMPs are written with microseconds (`JSON_TIMES`), and a TIMESTAMP or
DATE ordering is compared as its epoch microseconds or days.
"""

from __future__ import annotations

import re

from sqlglot import exp

from dsflow.core.model import HIDDEN_RANK, TopN
from dsflow.adapters.spark.frames import DELETED, KEEP, OFFSET, PARTITION
from dsflow.adapters.spark.retract_state import ROCKSDB, STATE_PROVIDER
from dsflow.adapters.spark.spec import TopNSpec
from dsflow.adapters.spark.topn_state import changelog_processors, processor

PARTITION_KEY = "__p"
OUTPUT = "p string, rank bigint, keep boolean, row string"
ROW_CHANGES = "p string, pk string, e string"
JSON_TIMES = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
              "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}


def rewrite(select: exp.Select, top_n: TopN, alias: str, primary_key: tuple[str, ...] | None,
            joined: str | None = None) -> tuple[str, TopNSpec]:
    """(the per-record SELECT, the spec). `select` is the query's SELECT in Spark names over its source's view
    (translate.py), its ROW_NUMBER window the projection named top_n.rank_column (HIDDEN_RANK when not selected);
    `primary_key` the source's when it is a changelog (None: a stream); `joined` the view of the join it ranks
    (adapters/spark/changelog_join.py, read as a changelog keyed by its output key)."""
    place = _joined_place(select, joined) if joined else None
    projections = list(select.selects)
    rank = top_n.rank_column or HIDDEN_RANK
    ranked = next(p for p in projections if isinstance(p, exp.Alias) and p.alias.lower() == rank.lower())
    window = ranked.find(exp.Window)  # under a CAST when the sink declares the rank another integer type
    assert window is not None  # select_sql's rank column is the ROW_NUMBER window (sql/topn.py restore_top_n)
    orders = window.args["order"].expressions
    partition = exp.func("TO_JSON", exp.func("ARRAY", *[exp.cast(p.copy(), "STRING")
                                                        for p in window.args["partition_by"]]))
    items = [partition.as_(PARTITION_KEY), *[o.this.copy().as_(f"__o{i}") for i, o in enumerate(orders)],
             *(place or _place(select, alias, primary_key)), *[p.copy() for p in projections if p is not ranked]]
    per_record = exp.select(*items).from_(select.args["from_"].this.copy())
    if select.args.get("where") is not None and primary_key is None and not joined:
        per_record.set("where", select.args["where"].copy())
    spec = TopNSpec(limit=top_n.limit,
                    columns=[p.alias_or_name for p in projections if p is not ranked or top_n.rank_column],
                    rank_column=ranked.alias if top_n.rank_column else None,
                    changelog=primary_key is not None or joined is not None,
                    descending=[bool(o.args.get("desc")) for o in orders],
                    nulls_first=[bool(o.args["nulls_first"]) if o.args.get("nulls_first") is not None
                                 else not o.args.get("desc") for o in orders])
    return per_record.sql(dialect="spark"), spec


def _joined_place(select: exp.Select, view: str) -> list[exp.Expr]:
    """`select` made to read the joined view `view` (in place), and its rows' key, offset and whether kept: a
    joined row's output key, 0 (an output key changes at most once a batch), alive and WHERE holds."""
    from dsflow.adapters.spark.changelog_join import aggregated_source

    key, offset, alive = aggregated_source(select, view)
    where = select.args.get("where")
    keep = exp.and_(exp.func("COALESCE", exp.paren(where.this.copy()), exp.false()), alive) if where else alive
    return [key.as_("__pk"), offset.as_("__off"), keep.as_(KEEP)]


def _place(select: exp.Select, alias: str, primary_key: tuple[str, ...] | None) -> list[exp.Expr]:
    """What ranks tied rows and keys the changes: a stream record's partition and offset; a changelog row's
    primary key (as text), its offset, and whether it is kept (not deleted, and WHERE holds: a row that stops
    matching leaves the ranking)."""
    offset = exp.column(OFFSET, table=alias).as_("__off")
    if primary_key is None:
        return [exp.column(PARTITION, table=alias).as_("__part"), offset]
    key = exp.func("TO_JSON", exp.func("ARRAY", *[exp.cast(exp.column(k, table=alias), "STRING")
                                                   for k in primary_key]))
    keep: exp.Expr = exp.not_(exp.column(DELETED, table=alias))
    where = select.args.get("where")
    if where is not None:
        keep = exp.and_(exp.func("COALESCE", exp.paren(where.this.copy()), exp.false()), keep)
    return [key.as_("__pk"), offset, keep.as_(KEEP)]


def ranked_frame(spark, spec: TopNSpec, records):
    """The result of the per-record rows `records`: the output columns (the rank at its place) and __keep."""
    from pyspark.sql import functions as F

    orders = [c for c in records.columns if re.fullmatch(r"__o\d+", c)]
    values = [c for c in spec.columns if c != spec.rank_column]
    types = {f.name: f.dataType.simpleString() for f in records.schema.fields}
    row_ddl = ", ".join(f"`{c}` {types[c]}" for c in values)
    # the processors' columns (topn_state.py) are named without leading underscores: Spark hands them over so
    place = [F.col("__pk").alias("pk"), F.col("__off").cast("long").alias("off"), F.col(KEEP).alias("keep")] \
        if spec.changelog else [F.col("__part").cast("int").alias("part"), F.col("__off").cast("long").alias("off")]
    rows = records.select(
        F.col(PARTITION_KEY).alias("p"), F.to_json(F.struct(*[_exact(records, c).alias(c) for c in orders]),
                                                   {"ignoreNullFields": "false"}).alias("o"), *place,
        F.to_json(F.struct(*[F.col(f"`{c}`") for c in values]), JSON_TIMES).alias("row"))
    spark.conf.set(STATE_PROVIDER, ROCKSDB)  # transformWithState keeps its state in RocksDB only
    if spec.changelog:
        by_row, by_partition = changelog_processors(spec.limit, spec.descending, spec.nulls_first)
        moved = rows.groupBy("pk").transformWithStateInPandas(by_row, ROW_CHANGES, "append", "None")
        changed = moved.groupBy("p").transformWithStateInPandas(by_partition, OUTPUT, "append", "None")
    else:
        top = processor(spec.limit, spec.descending, spec.nulls_first)
        changed = rows.groupBy("p").transformWithStateInPandas(top, OUTPUT, "append", "None")
    parsed = changed.select(F.from_json("row", row_ddl, JSON_TIMES).alias("__r"), F.col("rank"),
                            F.col("keep").alias(KEEP))
    out = [F.col("rank").alias(c) if c == spec.rank_column else F.col(f"__r.`{c}`").alias(c) for c in spec.columns]
    return parsed.select(*out, KEEP)


def _exact(frame, column: str):
    """An ordering as the state compares it exactly: a TIMESTAMP as epoch microseconds, a DATE as epoch days."""
    from pyspark.sql import functions as F

    kind = frame.schema[column].dataType.typeName()
    if kind in ("timestamp", "timestamp_ntz"):
        return F.unix_micros(F.col(f"`{column}`").cast("timestamp"))
    if kind == "date":
        return F.unix_date(F.col(f"`{column}`"))
    return F.col(f"`{column}`")
