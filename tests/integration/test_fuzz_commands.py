"""The command fuzzer: generated input to `dsflow topic produce`, `topic print` and `query` never makes dsflow
print a traceback or lose data.

- `topic produce` gets lines drawn by hypothesis (JSON objects, other JSON, broken JSON, control characters,
  bytes that are not UTF-8, blank lines) and a key field. It ends with exit 0 and every line on the topic in
  order (read back with an independent consumer), or exit 1, a DSF code and nothing on the topic. A batch of
  well-formed JSON objects is never refused.
- `topic print` gets generated option values and names: exit 0, 1 (a DSF code) or 2 (a usage error), nothing else.
- `query` gets SELECTs built from a grammar over a materialized view's snapshot (compared with DuckDB over the same
  rows) and mutated copies of them (characters dropped, doubled or inserted): exit 0 or a DSF code.

CI runs a fixed-seed slice (`derandomize=True`); more by hand: `DSFLOW_FUZZ_EXAMPLES=2000 python -m pytest
tests/integration/test_fuzz_commands.py -q` (docs/testing.md).
"""

from __future__ import annotations

import json
import math
from collections import Counter
import os
import time
import uuid

import duckdb
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsflow.engine import operations
from dsflow.adapters.sqlite import mv
from dsflow.cli import cli
from dsflow.errors import DsflowError
from support.projects import make_project

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("DSFLOW_FUZZ_EXAMPLES", "30"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

STORES = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
"""
STATS: Counter = Counter()
"""Commands run, by exit code: printed at the end of a run with -s (the figures of docs/testing.md)."""
QUIET = 0.3
NEXT_OFFSET: dict[str, int] = {}
"""The end of each fuzzed topic: only the produce test writes to it."""
# (page, hits) unique: the key
VIEW_ROWS = [(f"Page_{i % 7}", i % 5, i * 3 - 40, None if i % 11 == 0 else f"u{i % 4}") for i in range(35)]
VIEW_COLUMNS = [("page", "VARCHAR"), ("hits", "BIGINT"), ("score", "BIGINT"), ("who", "VARCHAR")]


@pytest.fixture(scope="module")
def fuzz_project(tmp_path_factory, broker):
    """A project with a one-partition Kafka stream (created) and a SQLite materialized view holding VIEW_ROWS."""
    prefix = f"fz{uuid.uuid4().hex[:6]}_"
    sql = f"""\
CREATE STREAM clicks (id BIGINT, page VARCHAR) WITH ('topic' = '{prefix}clicks', 'value.format' = 'json',
  'topic.partitions' = 1);
CREATE MATERIALIZED VIEW page_stats AS SELECT page, COUNT(*) AS hits, SUM(id) AS score, MAX(page) AS who
  FROM clicks GROUP BY page;
"""
    root = make_project(tmp_path_factory.mktemp("fuzzcmd"), {"stores/kafka.yml": STORES, "sql/all.sql": sql})
    args = ["-C", str(root), "--var", f"bootstrap={broker}"]
    assert CliRunner().invoke(cli, [*args, "topic", "create", "clicks"]).exit_code == 0
    project = operations.load(operations.Options(root, None, {"bootstrap": broker})).project
    view = next(r for r in project.relations if r.name == "page_stats")
    path = mv.database_path(project.root, project.state_path, project.environment)
    mv.ensure_table(path, view.topic, VIEW_COLUMNS, ["page", "hits"])
    mv.write_batch(path, view.topic, [c for c, _ in VIEW_COLUMNS], ["page", "hits"], VIEW_ROWS, "fuzz", 0)
    yield args, f"{prefix}clicks"
    CliRunner().invoke(cli, [*args, "topic", "delete", "clicks", "--yes"])


@pytest.fixture(scope="module", autouse=True)
def _figures():
    yield
    print(f"\ncommand fuzz: {sum(STATS.values())} commands: {STATS[0]} exit 0, {STATS[1]} exit 1 with a DSF code, "
          f"{STATS[2]} usage errors, {STATS['other']} other")


def _invoke(args: list[str], *more: str, stdin: bytes | None = None):
    return CliRunner().invoke(cli, [*args, *more], input=stdin)


def _assert_clean(result, allowed: tuple[int, ...] = (0, 1)) -> None:
    """Exit 0, or 1 with a DsflowError (shown without a traceback), or 2 for a usage error if allowed."""
    STATS[result.exit_code if result.exit_code in (0, 1, 2) else "other"] += 1
    assert result.exit_code in allowed, f"exit {result.exit_code}: {result.output!r} {result.exception!r}"
    if result.exit_code == 1:
        assert isinstance(result.exception, DsflowError), repr(result.exception)
        assert result.exception.code.startswith("DSF-E"), result.exception
    if result.exit_code == 2:
        assert "Usage" in result.output or "Error" in result.output, result.output


# --- topic produce -----------------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                          max_size=3), max_leaves=6)
OBJECTS = st.fixed_dictionaries({"id": st.integers(-2**40, 2**40), "page": st.text(max_size=12)},
                                optional={"extra": JSON_VALUES}).map(lambda d: json.dumps(d).encode())
NOT_OBJECTS = JSON_VALUES.filter(lambda v: not isinstance(v, dict)).map(lambda v: json.dumps(v).encode())
BROKEN = OBJECTS.flatmap(lambda b: st.integers(1, max(1, len(b) - 1)).map(lambda n: b[:n]))
CONTROL = st.sampled_from([b"\x00", b"\x01\x02", b"\x1b[31m", b"\x7f", b"\r", b"\t", b"\x0c"])
NOT_UTF8 = st.sampled_from([b"\xff", b"\xfe\xff", b"\xc3(", b"\xed\xa0\x80", b"\x80abc"])
BLANK = st.sampled_from([b"", b"   ", b"\t"])
LINE = st.one_of(OBJECTS, OBJECTS, NOT_OBJECTS, BROKEN, CONTROL, NOT_UTF8, BLANK, st.binary(max_size=20))


def _well_formed(lines: list[bytes]) -> bool:
    """Every line blank or a JSON object in UTF-8 (a reference for 'must be accepted')."""
    for line in lines:
        try:
            text = line.decode("utf-8").strip()
            if text and not isinstance(json.loads(text), dict):
                return False
        except (UnicodeDecodeError, ValueError):
            return False
    return True


def _records_from(bootstrap: str, topic: str, start: int, want: int) -> list[tuple[bytes | None, bytes]]:
    """The (key, value) records of the one-partition topic from offset `start`: `want` of them if they come
    within 10 s, and any more that come within QUIET seconds after (the broker's end offset lags an acknowledged
    write for a moment, so it is not asked)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fuzz-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, start)])
    records: list[tuple[bytes | None, bytes]] = []
    try:
        deadline = time.monotonic() + 10
        while len(records) < want and time.monotonic() < deadline:
            _take(consumer.poll(0.5), records)
        quiet = time.monotonic() + QUIET
        while time.monotonic() < quiet:
            _take(consumer.poll(0.1), records)
        return records
    finally:
        consumer.close()


def _take(message, records: list) -> None:
    if message is not None and message.error() is None:
        records.append((message.key(), message.value()))


@FUZZ
@given(lines=st.lists(LINE, max_size=6), key_field=st.sampled_from([None, "id", "page", "extra", "missing", ""]))
def test_produce_puts_every_line_or_nothing(fuzz_project, broker, lines, key_field):
    args, topic = fuzz_project
    before = NEXT_OFFSET[topic] if topic in NEXT_OFFSET else 0
    options = ["--key-field", key_field] if key_field is not None else []
    result = _invoke(args, "topic", "produce", "clicks", *options, stdin=b"\n".join(lines))
    _assert_clean(result)
    physical = b"\n".join(lines).split(b"\n")  # a generated line may hold a newline: the command sees two
    if result.exit_code == 1:
        extra = _records_from(broker, topic, before, 0)
        assert not extra, f"refused with {result.exception.code} but {len(extra)} record(s) were produced"
        assert not _well_formed(physical), f"well-formed lines refused: {result.exception}"
        return
    texts = (line.decode("utf-8").strip() for line in physical)
    sent = [text.encode() for text in texts if text]
    records = _records_from(broker, topic, before, len(sent))
    NEXT_OFFSET[topic] = before + len(records)
    assert [value for _, value in records] == sent, f"from offset {before} the topic holds {records}, not {sent}"
    assert f"Produced {len(sent)} record(s)." in result.output
    for (key, _), value in zip(records, sent, strict=False):
        field = json.loads(value).get(key_field) if key_field else None
        expected = None if field is None else (field if isinstance(field, str) else json.dumps(field))
        if expected == "":  # the broker gives an empty key back as no key
            assert key in (None, b""), (key, value, key_field)
        else:
            assert key == (None if expected is None else expected.encode()), (key, value, key_field)


# --- topic print ---------------------------------------------------------------------------------------------------

NAMES = st.sampled_from(["clicks", "page_stats", "nope", "", "db.sch.clicks", "café", "a" * 300, "-x", "\x00"])
LIMITS = st.one_of(st.none(), st.integers(-3, 3).map(str), st.sampled_from(["1e3", "x", "", "99999999999999999999"]))
TIMEOUTS = st.one_of(st.floats(-1, 0.3).map(repr), st.sampled_from(["nan", "-inf", "0", "x", "", "1e-9"]))


@FUZZ
@given(name=NAMES, limit=LIMITS, timeout=TIMEOUTS, raw=st.booleans(), latest=st.booleans())
def test_print_options_never_raise(fuzz_project, name, limit, timeout, raw, latest):
    args, _ = fuzz_project
    options = (["--limit", limit] if limit is not None else []) + ["--timeout", timeout]
    options += (["--raw"] if raw else []) + (["--latest"] if latest else [])
    result = _invoke(args, "topic", "print", name, *options)
    _assert_clean(result, allowed=(0, 1, 2))
    if result.exit_code == 0:
        for line in result.output.splitlines():
            assert isinstance(json.loads(line), dict), line
    if _number(timeout) is not None and not _number(timeout) >= 0:  # negative or NaN
        assert result.exit_code == 2, f"--timeout {timeout} accepted: {result.output!r}"


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


# --- query ---------------------------------------------------------------------------------------------------------

COLUMNS = ["page", "hits", "score", "who"]
NUMERIC = ["hits", "score"]


@st.composite
def selects(draw) -> str:
    """A SELECT over page_stats that SQLite and DuckDB answer alike (a total order, integers, text)."""
    if draw(st.booleans()):
        group = draw(st.sampled_from(["page", "hits", "who"]))
        aggregate = draw(st.sampled_from(["COUNT(*)", "SUM(score)", "MIN(score)", "MAX(hits)", "COUNT(who)"]))
        items, order = [group, f"{aggregate} AS agg"], f"{group} NULLS FIRST, agg"
        tail = f" GROUP BY {group}"
    else:
        items = draw(st.lists(st.sampled_from(COLUMNS + ["score * 2 + hits", "UPPER(page)", "hits % 3"]),
                              min_size=1, max_size=4, unique=True))
        order, tail = ", ".join(f"{i + 1} NULLS FIRST" for i in range(len(items))) + ", page, hits", ""
    where = draw(st.one_of(st.just(""), st.builds(lambda c, op, v: f" WHERE {c} {op} {v}", st.sampled_from(NUMERIC),
                                                  st.sampled_from(["<", ">=", "=", "<>"]), st.integers(-50, 200)),
                           st.sampled_from([" WHERE who IS NULL", " WHERE page LIKE 'Page_1%'",
                                            " WHERE who IN ('u1', 'u2')"])))
    return f"SELECT {', '.join(items)} FROM page_stats{where}{tail} ORDER BY {order}"


@st.composite
def mutated(draw) -> str:
    text = draw(selects())
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        how = draw(st.sampled_from(["drop", "double", "insert"]))
        if how == "drop":
            text = text[:at] + text[at + 1:]
        elif how == "double":
            text = text[:at] + text[at:at + 1] * 2 + text[at + 1:]
        else:
            text = text[:at] + draw(st.sampled_from(list("'\"();,*\\\x00\n") + ["--", "/*", "DROP TABLE x;", "é"]))\
                + text[at:]
    return text


def _duckdb_rows(sql: str) -> list[tuple]:
    con = duckdb.connect()
    con.execute("CREATE TABLE page_stats (page VARCHAR, hits BIGINT, score BIGINT, who VARCHAR)")
    con.executemany("INSERT INTO page_stats VALUES (?, ?, ?, ?)", VIEW_ROWS)
    return [tuple(row) for row in con.execute(sql).fetchall()]


@FUZZ
@given(sql=selects())
def test_generated_view_queries_equal_duckdb(fuzz_project, sql):
    args, _ = fuzz_project
    result = _invoke(args, "query", "--json", sql)
    _assert_clean(result, allowed=(0,))
    assert result.exit_code == 0, f"{sql}: {result.output} {result.exception!r}"
    rows = [tuple(item.values()) for item in json.loads(result.output)]
    expected = _duckdb_rows(sql)
    assert len(rows) == len(expected), sql
    for got, want in zip(rows, expected, strict=True):
        assert all(g == w or (isinstance(g, float) and math.isclose(g, w))
                   for g, w in zip(got, want, strict=False)), (sql, got, want)


@FUZZ
@given(sql=st.one_of(mutated(), st.text(max_size=40)))
def test_mutated_view_queries_never_raise(fuzz_project, sql):
    args, _ = fuzz_project
    result = _invoke(args, "query", sql)
    _assert_clean(result)
    if result.exit_code == 1:
        assert result.exception.code in {"DSF-E720", "DSF-E721", "DSF-E722", "DSF-E793"}, result.exception
