"""A Delta table (delta-rs, a local folder) of ARRAY, MAP and STRUCT columns, as `CREATE TABLE ... AS SELECT` of
such columns creates it, takes a batch in the shape Spark's toArrow gives it (adapters/tables/spark.table_writer).
They were declared as text, and the cast of a list to text failed the batch (found by the differential test's
CREATE TABLE ... AS SELECT, docs/validate.md)."""

from __future__ import annotations

import pyarrow as pa

from dsflow.adapters.tables import TableRef
from dsflow.adapters.tables.delta import DeltaFormat


def test_nested_columns_are_written_and_read_back(tmp_path):
    ref = TableRef("delta", str(tmp_path / "t"), {}, {})
    delta = DeltaFormat()
    delta.create(ref, [("id", "BIGINT"), ("a", "ARRAY<INT>"), ("m", "MAP<VARCHAR, INT>"),
                       ("s", "STRUCT<f INT, g VARCHAR>")], [])
    batch = pa.table({"id": pa.array([1, 2], pa.int64()),
                      "a": pa.array([[1, 2], None], pa.list_(pa.field("element", pa.int32()))),
                      "m": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int32())),
                      "s": pa.array([{"f": 1, "g": "x"}, None], pa.struct([("f", pa.int32()), ("g", pa.string())]))})
    assert delta.write_batch(ref, batch, [], "app", 0)
    names, rows = delta.rows(ref, 10)
    assert names == ["id", "a", "m", "s"]
    assert sorted(rows) == [(1, [1, 2], [("k", 1)], {"f": 1, "g": "x"}), (2, None, [], None)]
