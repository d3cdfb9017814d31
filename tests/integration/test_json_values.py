"""JSON values parsed in the Kafka reader (formats/json_values.py) against Spark's own from_json.

A JSON source with a dead-letter topic and simple column types is read in the layout "both": the reader's
pyarrow parse becomes `__value`, and records it cannot parse exactly go to Spark as text for from_json. These
tests read the same records through both layouts (real broker, real Spark) and check that the source view
sees the same values, and that the dead letters are the ones the record-by-record check names.
"""

from __future__ import annotations

import json
import math
import random
import struct
import subprocess
import sys
import uuid

import pytest

from dsflow.adapters.kafka import client
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.adapters.kafka.deadletters import HEADER_ERROR
from dsflow.adapters.spark.frames import source_format_options, source_view
from dsflow.adapters.spark.spec import SourceSpec
from dsflow.adapters.spark.translate import spark_type
from dsflow.formats import arrow
from dsflow.formats.arrow import arrow_type
from dsflow.formats.decoding import BOTH, JSON_STRUCT_TYPES, STRUCT, TEXT, value_layout
from dsflow.formats.json_values import _json_problem, parse_chunk, parsed
from support.registry_projects import raw_records

integration = pytest.mark.integration

COLUMNS = (("id", "BIGINT"), ("n", "INT"), ("s", "VARCHAR"), ("x", "DOUBLE"), ("f", "FLOAT"), ("b", "BOOLEAN"),
           ("t", "TINYINT"))
DDL = ", ".join(f"`{name}` {spark_type(sql_type)}" for name, sql_type in COLUMNS)

GOOD = [json.dumps({"id": i, "n": -i, "s": f"s{i}", "x": i / 8, "f": i / 3, "b": i % 2 == 0, "t": i % 100},
                   separators=(",", ":")).encode() for i in range(40)]

FAST = [  # records pyarrow reads exactly as from_json does
    b"{}", b'{"id":null,"s":null}', b'{"id":7}', b'{"id":1,"zzz":[1,2],"more":{"q":"r"}}',
    b'{"s":"\\u00e9\\ud83d\\ude00 \\/ \\" \\\\ \\u0000"}', '{"s":"é😀 ü"}'.encode(), b'{"\\u0069d":7}',
    b'{"x":3,"f":16777217}', b'{"x":99999999999999999999}', b'{"x":1e-400,"f":1e-50}', b'{"f":0.1,"x":4.9e-324}',
    b'{"n":-2147483648,"t":-128,"id":-9223372036854775808}', b'{ "s" : "x" , "id" : 3 }', b'{"b":false}',
]
SLOW = [  # records that parse, but not exactly like from_json in pyarrow: from_json reads them
    b'{"ID":1,"s":"a"}', b'{"id":1,"ID":2}', b'{"Id":2,"id":1}', b'{"s":12}', b'{"s":1.50}', b'{"s":1e2}',
    b'{"s":true}', b'{"s":{"a": 1, "b" : [1, 2.50]}}', b'{"s":[1, 2]}', b'{"n":3000000000,"id":5}',
    b'{"t":300,"id":5}', b'{"id":99999999999999999999,"n":5}', b'{"id":9223372036854775808}',
    b'{"x":-0,"f":-0}', b'{"x":-0.0}', b'{"x":NaN}', b'{"x":Infinity,"f":-Infinity}', b'{"x":1e400}',
    b'{"id":1,"id":2}', b'{"s":"a","s":"b"}', b'{"s":"\\ud800"}', b'  {"id":1}  ',
    b'{"id":1,"zzz":[1,{"a":2}]}',  # an undeclared field whose type pyarrow cannot infer (a list of mixed types)
]
BAD = [  # dead letters, as the record-by-record check names them
    b'{"ID":"x"}', b'{"\\u0049D":"x"}', b'{"id":1.0,"n":5}', b'{"id":1e3}', b'{"id":"1"}', b'{"x":"NaN"}',
    b'{"b":1}', b'{"id":true}', b'{"x":-NaN}', b'{"x":Inf}', b'{"zz":[1,{"a":-NaN}]}', b"null", b"[1,2]",
    b'{"id":1}{"id":2}', b'{"id":1,"n":2,}', b"", b" ", b'{"s":"\xff"}', b'{"s":"a\tb"}', b"not json",
]


# --- pure ------------------------------------------------------------------------------------------


def test_one_layout_predicate_for_the_schema_and_the_view() -> None:
    columns = [list(c) for c in COLUMNS]
    assert value_layout("json", columns, "dlq") == BOTH
    assert value_layout("json", columns, None) == TEXT  # no dead-letter topic: nothing is parsed in the reader
    assert value_layout("json", columns, "dlq", parses_json=False) == TEXT  # a reader that keeps no parse
    assert value_layout("avro", columns, "dlq") == STRUCT and value_layout("string", [["v", "VARCHAR"]], None) == STRUCT
    assert value_layout("json", [], "dlq") == TEXT
    for other in ("TIMESTAMP", "DATE", "DECIMAL(10, 2)", "BINARY", "BYTES", "VARCHAR(10)", "CHAR", "ARRAY<INT>",
                  "STRUCT<a INT>", "REAL"):
        assert value_layout("json", [["id", "BIGINT"], ["o", other]], "dlq") == TEXT, other
    assert value_layout("json", [["id", "BIGINT"], ["ID", "BIGINT"]], "dlq") == TEXT
    import pyarrow as pa

    spark_names = {"BIGINT": pa.int64(), "INT": pa.int32(), "SMALLINT": pa.int16(), "TINYINT": pa.int8(),
                   "DOUBLE": pa.float64(), "FLOAT": pa.float32(), "BOOLEAN": pa.bool_(), "STRING": pa.string()}
    for sql_type in JSON_STRUCT_TYPES:  # the Spark type of __value's field and of from_json agree with Arrow's
        assert arrow_type(sql_type) == spark_names[spark_type(sql_type)], sql_type
    for sql_type in (*JSON_STRUCT_TYPES, "TIMESTAMP", "DATE", "DECIMAL(10, 2)", "BINARY", "VARCHAR(10)", "ARRAY<INT>"):
        assert arrow.spark_type(sql_type) == spark_type(sql_type), sql_type  # the data source's DDL = from_json's


def test_dead_letters_are_those_of_the_record_by_record_check() -> None:
    """Chunks of good, parseable-but-different, bad records and tombstones: the same dead letters (and texts)
    as `_json_problem` on each record, and where the chunk became a struct, the values json.loads gives."""
    rnd = random.Random(6)
    for _ in range(400):
        chunk = rnd.sample(GOOD, rnd.randint(0, 5)) + rnd.sample(FAST, rnd.randint(0, 3))
        chunk += rnd.sample(SLOW, rnd.randint(0, 1)) + rnd.sample(BAD, rnd.randint(0, 2)) + [None] * rnd.randint(0, 2)
        rnd.shuffle(chunk)
        keep, array, bad = parse_chunk(chunk, COLUMNS)
        exact = [(i, p) for i, v in enumerate(chunk) if v is not None and (p := _json_problem(v, COLUMNS))]
        assert bad == exact, chunk
        assert keep == [i for i in range(len(chunk)) if i not in dict(exact)]
        if array is not None:
            assert len(array) == len(keep)
            for i, row in zip(keep, array.to_pylist(), strict=True):
                assert (row is None) == (chunk[i] is None)
        if not any(v in SLOW for v in chunk) and chunk:
            assert array is not None or not keep, chunk  # nothing that needs from_json: one struct


def test_only_records_pyarrow_reads_like_from_json_become_structs() -> None:
    for value in FAST:
        assert parsed([GOOD[0], value, None], COLUMNS) is not None, value
    for value in SLOW + BAD:
        assert parsed([GOOD[0], value, None], COLUMNS) is None, value


def test_a_lone_null_value_does_not_reach_pyarrow() -> None:
    """pyarrow 26's read_json crashes the process on the text `null`; the object-per-line test keeps it away."""
    code = ("from dsflow.formats.json_values import parse_chunk; "
            "print(parse_chunk([b'null'], (('id', 'BIGINT'),))[2])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "expected an object, got NoneType" in done.stdout


def test_tombstones_stay_null_structs_at_their_places() -> None:
    array = parsed([None, GOOD[1], None, b"{}", None], COLUMNS)
    assert [r is None for r in array.to_pylist()] == [True, False, True, False, True]
    assert array.to_pylist()[1]["s"] == "s1" and array.to_pylist()[3] == {n: None for n, _ in COLUMNS}
    assert parsed([None, None], COLUMNS).null_count == 2


# --- against Spark ---------------------------------------------------------------------------------


def _canonical(value):
    """Floats by their bits (NaN == NaN, -0.0 != 0.0), recursively."""
    if isinstance(value, float):
        return ("float", struct.pack(">d", value))
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _random_values(rnd: random.Random, count: int) -> list[bytes]:
    """Objects with numbers of every shape (float32 halfway points, long mantissas, extremes), escaped and raw
    unicode strings, missing, null and extra fields."""
    def number() -> str:
        kind = rnd.random()
        if kind < 0.3:
            return f"{rnd.uniform(-1e6, 1e6):.{rnd.randint(0, 20)}f}"
        if kind < 0.5:
            digits = "".join(rnd.choice("0123456789") for _ in range(rnd.randint(5, 30)))
            return f"{rnd.randint(1, 9)}.{digits}e{rnd.randint(-320, 308)}"
        if kind < 0.7:
            bits = rnd.randint(0, 0x7F7FFFFE)
            low, high = (struct.unpack(">f", struct.pack(">I", b))[0] for b in (bits, bits + 1))
            return repr((low + high) / 2)
        if kind < 0.85:
            return str(rnd.randint(-2**70, 2**70))
        return repr(rnd.uniform(-1, 1) * 10 ** rnd.randint(-300, 300))

    alphabet = ["a", "Z", " ", "é", "😀", "\\n", "\\t", "\\\"", "\\\\", "\\/", "\\u00fc", "\\ud83d\\ude00", "\\u0000",
                "ß"]
    values = []
    for _ in range(count):
        fields = {"x": number(), "f": number(), "id": str(rnd.randint(-2**63, 2**63 - 1)),
                  "n": str(rnd.randint(-2**31, 2**31 - 1)), "t": str(rnd.randint(-128, 127)),
                  "b": rnd.choice(["true", "false"]),
                  "s": '"' + "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 8))) + '"',
                  "extra": '{"a":[1,2],"b":"c"}'}
        kept = [(k, v if rnd.random() > 0.1 else "null") for k, v in fields.items() if rnd.random() > 0.15]
        values.append(("{" + ",".join(f'"{k}":{v}' for k, v in kept) + "}").encode())
    return values


@integration
def test_pyarrow_reads_random_values_as_from_json_does(spark) -> None:
    """Where the reader's parse stands in for from_json, it gives the same values, bit for bit."""
    from pyspark.sql import functions as F

    values = _random_values(random.Random(11), 4000)
    alone = [(v, parsed([v], COLUMNS)) for v in values]
    texts = [v.decode() for v, array in alone if array is not None]
    ours = [array.to_pylist()[0] for _, array in alone if array is not None]
    assert len(texts) > 2000  # the others hold a -0 or a number out of range: from_json reads them
    together = parsed([t.encode() for t in texts], COLUMNS)  # one chunk gives what each record gave alone
    assert together is not None and _canonical(together.to_pylist()) == _canonical(ours)
    frame = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "i INT, value STRING")
    spark_rows = [r.v.asDict() for r in frame.select("i", F.from_json("value", DDL).alias("v")).orderBy("i").collect()]
    assert len(spark_rows) == len(ours)
    differ = [(t, a, b) for t, a, b in zip(texts, ours, spark_rows, strict=True) if _canonical(a) != _canonical(b)]
    assert not differ, differ[:5]


def _produce(broker: str, partitions: list[list[bytes | None]]) -> str:
    """A topic with one partition per list of values; record keys are partition * 1000 + index (a changelog's
    BIGINT key)."""
    topic = f"jsonvalues-{uuid.uuid4().hex[:8]}"
    ensure_topic(broker, TopicSpec(topic, len(partitions)))
    errors = client.DeliveryErrors()
    producer = client.new_producer(client.client_config(broker), errors)
    for partition, values in enumerate(partitions):
        for i, value in enumerate(values):
            producer.produce(topic, value, str(partition * 1000 + i).encode(), partition=partition)
    client.flush_or_raise(producer, topic, sum(map(len, partitions)), errors)
    return topic


def _source(broker: str, topic: str, dlq: str | None, changelog: bool) -> SourceSpec:
    return SourceSpec(view="v", topic=topic, client_config={"bootstrap.servers": broker}, schema_ddl=DDL,
                      value_columns=[list(c) for c in COLUMNS], dlq_topic=dlq,
                      changelog_key={"id": "BIGINT"} if changelog else {})


def _read(spark, source: SourceSpec) -> tuple[dict[str, dict], object]:
    """The source view's rows by record key (canonical), and the raw data source frame."""
    raw = (spark.read.format("dsflow_kafka").option("bootstrap.servers", source.client_config["bootstrap.servers"])
           .option("topic", source.topic).options(**source_format_options(source, "analytics.public.q")).load())
    return {r["__key"]: _canonical(r.asDict()) for r in source_view(raw, source).collect()}, raw


def _dead_letters(broker: str, topic: str) -> dict[str, str]:
    ensure_topic(broker, TopicSpec(topic, 1))  # a read without dead letters never creates it
    letters = {}
    for message in raw_records(broker, topic):
        headers = {k: v.decode() for k, v in message.headers()}
        letters[message.key().decode()] = headers[HEADER_ERROR]
    return letters


@integration
@pytest.mark.parametrize("changelog", [False, True], ids=["stream", "changelog"])
def test_both_layouts_give_the_source_view_the_same_rows(broker, spark, changelog) -> None:
    """One topic, one chunk per partition: only records pyarrow reads exactly; those and one dead letter; every
    edge case; and each parseable-but-different or bad record alone among good ones. Read as text for from_json
    (no dead-letter topic: today's values) and in the layout "both": the same view rows (values, tombstones as
    __deleted), minus the dead letters, which are exactly the record-by-record check's, with its texts."""
    partitions = [GOOD[:10] + [None] + FAST + [None], GOOD[10:20] + [b'{"id":"x"}'] + FAST[:4] + [None],
                  GOOD[20:] + FAST + SLOW + BAD + [None, None]]
    partitions += [GOOD[:3] + [value] for value in SLOW + BAD]
    topic = _produce(broker, partitions)
    expected, _ = _read(spark, _source(broker, topic, None, changelog))
    got, raw = _read(spark, _source(broker, topic, f"{topic}-dlq", changelog))

    values = {str(p * 1000 + i): v for p, part in enumerate(partitions) for i, v in enumerate(part)}
    bad = {key: problem for key, v in values.items() if v is not None and (problem := _json_problem(v, COLUMNS))}
    assert _dead_letters(broker, f"{topic}-dlq") == bad
    assert got == {key: row for key, row in expected.items() if key not in bad}
    assert "__value" in raw.columns and "value" in raw.columns
    texts = {int(r.key) // 1000 for r in raw.where("value IS NOT NULL").select("key").collect()}
    assert texts == {2} | {3 + i for i in range(len(SLOW))}  # the chunks with a record only from_json reads

    row = {v: got[key] for key, v in values.items() if int(key) // 1000 == 2 and v is not None and key in got}
    assert row[b'{"s":12}']["s"] == "12" and row[b'{"s":1.50}']["s"] == "1.5"  # what from_json makes of them
    assert row[b'{"s":{"a": 1, "b" : [1, 2.50]}}']["s"] == '{"a":1,"b":[1,2.5]}'
    assert row[b'{"n":3000000000,"id":5}']["n"] is None and row[b'{"n":3000000000,"id":5}']["id"] == 5
    assert row[b'{"id":1,"id":2}']["id"] == 2 and row[b'{"s":"\\ud800"}']["s"] == "?"
    assert row[b'{"x":-0,"f":-0}']["x"] == _canonical(0.0) and row[b'{"x":-0.0}']["x"] == _canonical(-0.0)
    assert row[b'{"ID":1,"s":"a"}']["s"] == "a" and (changelog or row[b'{"ID":1,"s":"a"}']["id"] is None)
    assert math.isnan(struct.unpack(">d", row[b'{"x":NaN}']["x"][1])[0])
    if changelog:
        assert sum(r["__deleted"] for r in got.values()) == 5
