"""Arrow and Spark types of the decoded value struct (`__value`) a reader hands Spark.

    arrow_type        a column type -> the Arrow type Spark expects for it (STRUCT, ARRAY, MAP: nested)
    value_struct      the relation's columns -> the Arrow struct of `__value`
    spark_struct_ddl  the same struct in Spark DDL, for a data source's schema
"""

from __future__ import annotations

from typing import Any

from dsflow.core.formats import base_type
from dsflow.core.nested import Shape, parse_type

VALUE_COLUMN = "__value"
"""The struct column holding decoded columns (formats other than json; json in the layout "both")."""


Bad = list[tuple[int, str]]
"""(index in the chunk, error text) of records that did not decode."""


def arrow_type(sql_type: str) -> Any:
    """The Arrow type Spark expects for a column type (STRUCT, ARRAY and MAP of them too)."""
    try:
        return _arrow_of(parse_type(sql_type))
    except ValueError:
        return _scalar(sql_type)


def _arrow_of(shape: Shape) -> Any:
    import pyarrow as pa

    if shape.kind == "struct":
        return pa.struct([(name, _arrow_of(sub)) for name, sub in shape.fields])
    if shape.kind == "array":
        return pa.list_(_arrow_of(shape.element_shape))
    if shape.kind == "map":
        return pa.map_(_arrow_of(shape.key_shape), _arrow_of(shape.element_shape))
    return _scalar(shape.type)


def _scalar(sql_type: str) -> Any:
    import re

    import pyarrow as pa

    name = base_type(sql_type)
    simple = {"BIGINT": pa.int64(), "INT": pa.int32(), "INTEGER": pa.int32(), "SMALLINT": pa.int16(),
              "TINYINT": pa.int8(), "DOUBLE": pa.float64(), "FLOAT": pa.float32(), "BOOLEAN": pa.bool_(),
              "BINARY": pa.binary(), "VARBINARY": pa.binary(), "BYTES": pa.binary(), "DATE": pa.date32(),
              "TIMESTAMP": pa.timestamp("us", tz="UTC"), "TIMESTAMPTZ": pa.timestamp("us", tz="UTC")}
    if name == "DECIMAL":
        digits = [int(d) for d in re.findall(r"\d+", sql_type)] or [10, 0]
        return pa.decimal128(digits[0], digits[1] if len(digits) > 1 else 0)
    return simple.get(name, pa.string())


def value_struct(columns: tuple[tuple[str, str], ...]) -> Any:
    import pyarrow as pa

    return pa.struct([(name, arrow_type(sql_type)) for name, sql_type in columns])


def spark_struct_ddl(columns: list[tuple[str, str]]) -> str:
    """`__value STRUCT<...>` in Spark DDL, for the data source's schema."""
    return f"{VALUE_COLUMN} STRUCT<" + ", ".join(f"`{n}`: {spark_type(t)}" for n, t in columns) + ">"


SPARK_SCALARS = {"BIGINT": "BIGINT", "INT": "INT", "INTEGER": "INT", "SMALLINT": "SMALLINT", "TINYINT": "TINYINT",
                 "DOUBLE": "DOUBLE", "FLOAT": "FLOAT", "BOOLEAN": "BOOLEAN", "VARCHAR": "STRING", "STRING": "STRING",
                 "TEXT": "STRING", "DATE": "DATE", "TIMESTAMP": "TIMESTAMP", "BINARY": "BINARY", "VARBINARY": "BINARY"}
"""Column types spelled in Spark SQL without sqlglot, as sqlglot spells them (tests/unit/test_layers.py checks): a data
source's schema() runs in Spark's Python processes, where importing sqlglot cost ~30 MB each."""


def spark_type(sql_type: str) -> str:
    """A column type in Spark SQL (as adapters/spark/translate.py spells it for the source view's from_json)."""
    known = SPARK_SCALARS.get(sql_type.strip().upper())
    if known:
        return known
    from sqlglot import exp

    return exp.DataType.build(sql_type).sql(dialect="spark")
