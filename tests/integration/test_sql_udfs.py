"""User-defined Python functions on Spark (issue 46 item 3): Nexmark q14's count_char and functions of other types,
declared with CREATE FUNCTION, run as pandas UDFs over records on the broker, compared with the same Python functions
applied to the records in plain Python."""

from __future__ import annotations

import importlib.util
import json

import pytest

from support.streaming import produce, records, run, streaming_project

pytestmark = pytest.mark.integration

UDFS = '''\
from __future__ import annotations

from datetime import datetime


def count_char(s: str, c: str) -> int:
    """Nexmark q14's count_char: how many times c occurs in s."""
    return 0 if s is None else s.count(c)


def scaled(price: int, factor: float) -> float | None:
    return None if price is None else price * factor


def daytime(at: datetime, loud: bool) -> str:
    word = "dayTime" if 8 <= at.hour <= 18 else "nightTime"
    return word.upper() if loud else word
'''

SQL = """\
CREATE FUNCTION count_char(s VARCHAR, c VARCHAR) RETURNS BIGINT LANGUAGE PYTHON AS 'lib.udfs:count_char';
CREATE FUNCTION scaled(price BIGINT, factor DOUBLE) RETURNS DOUBLE LANGUAGE PYTHON AS 'lib.udfs:scaled';
CREATE FUNCTION daytime(at TIMESTAMP, loud BOOLEAN) RETURNS VARCHAR LANGUAGE PYTHON AS 'lib.udfs:daytime';

CREATE STREAM bid (auction BIGINT, bidder BIGINT, price BIGINT, ms BIGINT, extra VARCHAR)
  WITH ('value.format' = 'json', 'topic.partitions' = 1);

CREATE STREAM q14 AS SELECT auction, bidder, scaled(price, 0.908) AS price,
  daytime(TO_TIMESTAMP_LTZ(ms, 3), auction % 2 = 0) AS bid_time_type, extra, count_char(extra, 'c') AS c_counts
FROM bid WHERE count_char(extra, 'c') > 0 OR extra IS NULL;
"""


def _bid(i: int) -> dict:
    extra = None if i % 7 == 0 else "abc" * (i % 4) + "x" * (i % 3)
    return {"auction": i % 5, "bidder": 100 + i, "price": None if i % 11 == 0 else 1000 + 37 * i,
            "ms": 1_700_000_000_000 + i * 2_345_678, "extra": extra}


def _reference(tmp_path) -> object:
    spec = importlib.util.spec_from_file_location("udfs_reference", tmp_path / "project" / "lib" / "udfs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_query_calling_python_functions_equals_plain_python(tmp_path, spark, broker) -> None:
    from datetime import datetime, timezone

    project = streaming_project(tmp_path, broker, SQL, {"lib/__init__.py": "", "lib/udfs.py": UDFS})
    assert [q.functions for q in project.queries] == [("count_char", "daytime", "scaled")]
    assert {c.name: c.type for c in project.queries[0].output_columns}["c_counts"] == "BIGINT"
    bids = [_bid(i) for i in range(60)]
    produce(broker, project, "bid", bids)
    run(spark, project, "q14", tmp_path)
    got = sorted((json.loads(r["value"]) for r in records(broker, project, "q14")), key=lambda r: r["bidder"])
    ref = _reference(tmp_path)
    want = []
    for b in bids:
        if not (ref.count_char(b["extra"], "c") > 0 or b["extra"] is None):
            continue
        at = datetime.fromtimestamp(b["ms"] / 1000, tz=timezone.utc).replace(tzinfo=None)
        row = {"auction": b["auction"], "bidder": b["bidder"], "price": ref.scaled(b["price"], 0.908),
               "bid_time_type": ref.daytime(at, b["auction"] % 2 == 0), "extra": b["extra"],
               "c_counts": ref.count_char(b["extra"], "c")}
        want.append({k: v for k, v in row.items() if v is not None})  # to_json leaves out null fields
    assert len(want) > 30 and any("price" not in w for w in want) and any("extra" not in w for w in want)
    assert [r["bidder"] for r in got] == [w["bidder"] for w in want]
    for row, expected in zip(got, want, strict=True):
        assert row.keys() == expected.keys()
        assert {k: v for k, v in row.items() if k != "price"} == {k: v for k, v in expected.items() if k != "price"}
        assert row.get("price") == pytest.approx(expected.get("price"))
