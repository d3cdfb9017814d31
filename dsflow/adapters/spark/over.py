"""Bounded OVER aggregates on Spark (sql/over.py recognises the SQL): one output row per input row, with SUM, COUNT,
COUNT(DISTINCT), AVG, MIN or MAX over the rows of its frame.

Spark Structured Streaming has no OVER windows ("non-time-based windows are not supported on streaming
DataFrames"), so a `transformWithStateInPandas` operator in event-time mode does it (append mode, state in RocksDB,
in the checkpoint), keyed by the PARTITION BY values: the per-record SELECT (`rewrite`) gives each record's key,
event time (the source view's watermarked __ts), place (partition, offset), aggregate arguments and FILTER results
and its other output columns; over_state.py holds a key's rows until the watermark passes their time and then
writes them in event-time order, each with the aggregates of its frame. A TIMESTAMP or DATE argument of MIN/MAX
goes through the state as epoch microseconds or days; every aggregate comes back as text, cast to its column's type.
"""

from __future__ import annotations

from sqlglot import exp

from dsflow.adapters.spark.frames import OFFSET, PARTITION
from dsflow.adapters.spark.retract_state import ROCKSDB, STATE_PROVIDER
from dsflow.adapters.spark.spec import OverSpec
from dsflow.adapters.spark.topn import JSON_TIMES, _exact
from dsflow.core.model import Column, OverWindow
from dsflow.sql.over import over_parts

PARTITION_KEY = "__p"
FUNCTIONS: dict[type[exp.Expr], str] = {exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}


def rewrite(select: exp.Select, over: OverWindow, alias: str, columns: tuple[Column, ...]) -> tuple[str, OverSpec]:
    """(the per-record SELECT, the spec). `select` is the query's SELECT in Spark names over its source's view
    (translate.spark_select), each OVER aggregate a projection; `columns` the query's output columns."""
    types = {c.name.lower(): c.type for c in columns}
    items: list[exp.Expr] = []
    aggregates: list[dict[str, str]] = []
    outputs: list[tuple[str, int | None]] = []
    partition: list[exp.Expr] = []
    for projection in select.selects:
        window = _window_of(projection)
        if window is None:
            items.append(projection.copy())
            outputs.append((projection.alias_or_name, None))
            continue
        index = len(aggregates)
        function, argument, condition = over_parts(window)
        items += [(argument.copy() if argument is not None else exp.Null()).as_(f"__a{index}"),
                  (exp.func("COALESCE", exp.paren(condition.copy()), exp.false()) if condition is not None
                   else exp.true()).as_(f"__f{index}")]
        aggregates.append({"function": _function(function), "type": types.get(projection.alias.lower(), "BIGINT")})
        outputs.append((projection.alias, index))
        partition = [p.copy() for p in window.args.get("partition_by") or []]
    key = exp.func("TO_JSON", exp.func("ARRAY", *[exp.cast(p, "STRING") for p in partition])) if partition \
        else exp.Literal.string("[]")
    place = [exp.column("__ts", table=alias).as_("__ts"), exp.column(PARTITION, table=alias).as_("__part"),
             exp.column(OFFSET, table=alias).as_("__off")]
    per_record = exp.select(key.as_(PARTITION_KEY), *place, *items).from_(select.args["from_"].this.copy())
    if select.args.get("where") is not None:
        per_record.set("where", select.args["where"].copy())
    return per_record.sql(dialect="spark"), OverSpec(frame=over.frame, preceding=over.preceding,
                                                      aggregates=aggregates, columns=outputs)


def _window_of(projection: exp.Expr) -> exp.Window | None:
    """The OVER aggregate a projection is: `agg OVER (...) AS a`, or under the CAST an INSERT INTO's store
    assignment puts around it (the sink's column type)."""
    body = projection.this if isinstance(projection, exp.Alias) else None
    if isinstance(body, exp.Cast):
        body = body.this
    return body if isinstance(body, exp.Window) else None


def _function(function: exp.Expr) -> str:
    if isinstance(function, exp.Count):
        return "count_distinct" if isinstance(function.this, exp.Distinct) else \
            "count_star" if isinstance(function.this, exp.Star) or function.this is None else "count"
    return FUNCTIONS[type(function)]


def over_frame(spark, spec: OverSpec, records):
    """The result of the per-record rows `records`: the output columns, in order."""
    from pyspark.sql import functions as F

    from dsflow.adapters.spark.over_state import OUTPUT, processor

    values = [name for name, index in spec.columns if index is None]
    types = {f.name: f.dataType.simpleString() for f in records.schema.fields}
    row_ddl = ", ".join(f"`{c}` {types[c]}" for c in values)
    inputs = [_exact(records, f"__a{i}").alias(f"__a{i}") for i in range(len(spec.aggregates))] + \
        [F.col(f"__f{i}") for i in range(len(spec.aggregates))]
    over = {"frame": spec.frame, "preceding": spec.preceding,
            "aggregates": [{"function": a["function"], "number": _number(records, f"__a{i}")}
                           for i, a in enumerate(spec.aggregates)]}
    rows = records.select(
        F.col(PARTITION_KEY).alias("p"), F.col("__ts"), F.unix_micros("__ts").alias("t"),
        F.col("__part").cast("int").alias("part"), F.col("__off").cast("long").alias("off"),
        F.to_json(F.struct(*[F.col(f"`{c}`") for c in values]), JSON_TIMES).alias("row"),
        F.to_json(F.struct(*inputs), {"ignoreNullFields": "false"}).alias("a"))
    spark.conf.set(STATE_PROVIDER, ROCKSDB)  # transformWithState keeps its state in RocksDB only
    written = rows.groupBy("p").transformWithStateInPandas(processor(over), OUTPUT, "append", "EventTime")
    parsed = written.select(F.from_json("row", row_ddl, JSON_TIMES).alias("__r"),
                            F.from_json("aggs", ", ".join(f"a{i} string" for i in range(len(spec.aggregates))))
                            .alias("__g"))
    out = [F.col(f"__r.`{name}`").alias(name) if index is None else
           _typed(F.col(f"__g.a{index}"), spec.aggregates[index], records.schema[f"__a{index}"].dataType).alias(name)
           for name, index in spec.columns]
    return parsed.select(*out)


def _kind(frame, column: str) -> str:
    return frame.schema[column].dataType.typeName()


def _number(frame, column: str) -> str | None:
    kind = _kind(frame, column)
    return "decimal" if kind == "decimal" else "double" if kind in ("double", "float") else \
        "integral" if kind in ("byte", "short", "integer", "long") else None


def _typed(text, aggregate: dict[str, str], argument):
    """An aggregate's text as its column's type: first as Spark types the aggregate of `argument` (its Spark type;
    a TIMESTAMP or DATE from its epoch microseconds or days), then cast to the column's type (an INSERT INTO's
    sink may declare another)."""
    from pyspark.sql import functions as F

    kind = argument.typeName()
    function = aggregate["function"]
    if function in ("min", "max") and kind in ("timestamp", "timestamp_ntz"):
        value = F.timestamp_micros(text.cast("long")).cast(argument.simpleString())
    elif function in ("min", "max") and kind == "date":
        value = F.date_from_unix_date(text.cast("int"))
    else:
        value = text.cast(_natural(function, argument))
    return value.cast(aggregate["type"])


def _natural(function: str, argument) -> str:
    """Spark's type of the aggregate `function` of an argument of Spark type `argument`."""
    kind = argument.typeName()
    if function.startswith("count"):
        return "bigint"
    if function in ("min", "max"):
        return argument.simpleString()
    if kind == "decimal":
        precision, scale = (argument.precision + 10, argument.scale) if function == "sum" else \
            (argument.precision + 4, argument.scale + 4)
        return f"decimal({min(precision, 38)}, {min(scale, 38)})"
    if function == "sum" and kind in ("byte", "short", "integer", "long"):
        return "bigint"
    return "double"
