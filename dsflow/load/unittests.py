"""The project's query tests (`dsflow test`): tests/*.yml read into core/unittests.py's UnitTest, checked against the
project. Every problem is a diagnostic at file:line (DSF-E880 to DSF-E887), all raised together (ProjectError).

    tests:
      - name: closes_window
        query: curated.counts            # the query's name, as `dsflow graph` shows it (or its address)
        batches:                         # arrival batches, in order; `inputs:` is one batch
          - pageviews:                   # a source relation of the query (or its alias)
              - {id: 1, viewtime: 1000, userid: u1}
            watermark: "1970-01-01 00:00:00"   # expected after this batch (optional)
        expect:
          rows: [...]                    # a stream's rows (a multiset; `ordered: true` for a list)
          state: [...]                   # a changelog's or a view's rows by key, after the last batch
          dead_letters: [{..., _rule: name}]
          expectations: {rule: {passed: 3, failed: 1}}

A record's `_time` gives its record time (epoch ms or a timestamp) when the relation has no 'timestamp' column;
`_delete: true` makes a changelog record a delete of its key (a tombstone).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from dsflow.core.model import Column, Project, Query, Relation
from dsflow.core.suggest import did_you_mean
from dsflow.core.unittests import Batch, Expected, Record, UnitTest
from dsflow.errors import Diagnostic, Location, ProjectError
from dsflow.load.yamlpos import Positioned, parse_yaml

TEST_KEYS = {"name", "query", "inputs", "batches", "expect"}
EXPECT_KEYS = {"rows", "ordered", "state", "dead_letters", "expectations"}
RECORD_KEYS = {"_time", "_delete"}
FOLDER = "tests"


class _File:
    """One test file being read: its positions and the diagnostics found so far."""

    def __init__(self, path: str, positions: Positioned, project: Project) -> None:
        self.path, self.positions, self.project = path, positions, project
        self.problems: list[Diagnostic] = []

    def error(self, code: str, message: str, keys: tuple, hint: str | None = None, key: bool = False) -> None:
        where = self.positions.key_location(keys) if key else self.positions.location(keys)
        self.problems.append(Diagnostic(code, message, where, hint))


def test_files(root: Path) -> list[Path]:
    folder = root / FOLDER
    return sorted([*folder.glob("*.yml"), *folder.glob("*.yaml")]) if folder.is_dir() else []


def load_tests(project: Project, names: tuple[str, ...] = ()) -> list[UnitTest]:
    """The project's tests (those named, if any); ProjectError with every problem found."""
    root = Path(project.root)
    tests: list[UnitTest] = []
    problems: list[Diagnostic] = []
    for path in test_files(root):
        shown = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        found, diagnostics = read_file(path.read_text(encoding="utf-8"), shown, project)
        tests += found
        problems += diagnostics
    seen: dict[str, UnitTest] = {}
    for test in tests:
        if test.name in seen:
            problems.append(Diagnostic("DSF-E880", f"the test name '{test.name}' is used twice", test.location,
                                       f"first at {seen[test.name].location}; rename one"))
        seen.setdefault(test.name, test)
    for name in names:
        if name not in seen:
            problems.append(Diagnostic("DSF-E887", f"no test named '{name}'", Location(FOLDER),
                                       did_you_mean(name, seen) or f"the project has no test in {FOLDER}/*.yml"))
    if problems:
        raise ProjectError(diagnostics=problems)
    return [t for t in tests if not names or t.name in names]


def read_file(text: str, path: str, project: Project) -> tuple[list[UnitTest], list[Diagnostic]]:
    """The tests of one file and the problems found in it."""
    data, positions, problems = parse_yaml(text, path)
    if problems:
        return [], problems
    file = _File(path, positions, project)
    if not isinstance(data, dict) or not isinstance(data.get("tests"), list) or set(data) - {"tests"}:
        file.error("DSF-E880", "a test file is a mapping with one key, 'tests': a list of tests", ())
        return [], file.problems
    tests = [t for i, item in enumerate(data["tests"]) if (t := _test(file, item, ("tests", i))) is not None]
    return tests, file.problems


def _test(file: _File, item: Any, at: tuple) -> UnitTest | None:
    if not isinstance(item, dict):
        file.error("DSF-E880", "a test is a mapping (name, query, inputs or batches, expect)", at)
        return None
    before = len(file.problems)
    for key in set(item) - TEST_KEYS:
        file.error("DSF-E880", f"unknown key '{key}' in a test", (*at, key), did_you_mean(str(key), TEST_KEYS), True)
    for key in ("name", "query", "expect"):
        if key not in item:
            file.error("DSF-E880", f"the test has no '{key}'", at)
    if ("inputs" in item) == ("batches" in item):
        file.error("DSF-E880", "a test gives its input as 'inputs' (one batch) or 'batches' (a list), one of them",
                   at)
    query = _query(file, item.get("query"), (*at, "query")) if "query" in item else None
    if query is None or len(file.problems) > before:
        return None
    raw_batches = [item["inputs"]] if "inputs" in item else item["batches"]
    batch_at = (lambda i: (*at, "inputs")) if "inputs" in item else (lambda i: (*at, "batches", i))
    if not isinstance(raw_batches, list):
        file.error("DSF-E880", "'batches' is a list of arrival batches", (*at, "batches"))
        return None
    batches = tuple(_batch(file, query, b, batch_at(i)) for i, b in enumerate(raw_batches))
    sink = file.project.relation(query.sink)
    keyed = sink is not None and sink.kind != "stream"
    expected = _expected(file, query, item["expect"], (*at, "expect"), keyed)
    if len(file.problems) > before or expected is None:
        return None
    return UnitTest(name=str(item["name"]), query=query.fqn, batches=batches, expected=expected,
                    location=file.positions.location(at), keyed=keyed)


def _query(file: _File, name: Any, at: tuple) -> Query | None:
    text = str(name).removeprefix("query.")
    found = [q for q in file.project.queries if q.fqn == text or q.fqn.endswith("." + text)]
    if len(found) == 1:
        return found[0]
    names = [q.fqn for q in file.project.queries]
    if found:
        file.error("DSF-E881", f"'{name}' names several queries: {', '.join(q.fqn for q in found)}", at,
                   "write the query's full name")
    else:
        file.error("DSF-E881", f"no query '{name}' in the project", at,
                   did_you_mean(text.rsplit(".", 1)[-1], [n.rsplit(".", 1)[-1] for n in names]) or
                   "see 'dsflow graph'")
    return None


def _source(file: _File, query: Query, name: str, at: tuple) -> Relation | None:
    """The relation a batch's key names: a source relation of the query by full or short name, or its alias."""
    for source in query.sources:
        if name in (source.relation, source.alias) or source.relation.endswith("." + name):
            return file.project.relation(source.relation)
    short = sorted({s.relation.rsplit(".", 1)[-1] for s in query.sources})
    file.error("DSF-E882", f"the query {query.fqn} reads no relation '{name}'", at,
               did_you_mean(name, short), key=True)
    return None


def _batch(file: _File, query: Query, raw: Any, at: tuple) -> Batch:
    if not isinstance(raw, dict):
        file.error("DSF-E880", "an arrival batch is a mapping: source relation -> list of records", at)
        return Batch(records={})
    records: dict[str, tuple[Record, ...]] = {}
    for name, rows in raw.items():
        if name == "watermark":
            continue
        relation = _source(file, query, str(name), (*at, name))
        if relation is None:
            continue
        if not isinstance(rows, list):
            file.error("DSF-E880", f"the records of '{name}' are a list of mappings", (*at, name))
            continue
        records[relation.fqn] = records.get(relation.fqn, ()) + tuple(
            _record(file, relation, row, (*at, name, i)) for i, row in enumerate(rows))
    watermark = raw.get("watermark")
    if watermark is not None and not isinstance(watermark, str | dt.datetime):
        file.error("DSF-E884", "a batch's 'watermark' is a timestamp such as '2024-01-01 00:00:05'",
                   (*at, "watermark"))
    return Batch(records=records, watermark=str(watermark) if watermark is not None else None,
                 location=file.positions.location(at))


def _record(file: _File, relation: Relation, row: Any, at: tuple) -> Record:
    if not isinstance(row, dict):
        file.error("DSF-E880", "a record is a mapping of column -> value", at)
        return Record(values={})
    values = {k: v for k, v in row.items() if k not in RECORD_KEYS}
    _check_row(file, relation.columns, values, at, f"{relation.kind} {relation.fqn}")
    delete = row.get("_delete") is True
    if delete and relation.kind != "changelog":
        file.error("DSF-E880", f"'_delete' deletes a changelog's key; {relation.fqn} is a {relation.kind}",
                   (*at, "_delete"))
    time = row.get("_time")
    if time is None and relation.timestamp and relation.column(relation.timestamp) is not None:
        time = values.get(relation.timestamp)
    millis = _millis(time)
    if time is not None and millis is None:
        file.error("DSF-E884", f"'{time}' is not a time: epoch milliseconds or a timestamp", at)
    return Record(values=values, time_ms=millis, delete=delete)


def _millis(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return int(aware.timestamp() * 1000)
    return None


def _check_row(file: _File, columns: tuple[Column, ...] | list[Column], row: dict, at: tuple, what: str,
               allowed: frozenset[str] = frozenset()) -> None:
    """Unknown columns (DSF-E883) and values that do not fit their column's type (DSF-E884)."""
    by_name = {c.name: c for c in columns}
    for name, value in row.items():
        column = by_name.get(name)
        if column is None:
            if name not in allowed:
                file.error("DSF-E883", f"the {what} has no column '{name}'", (*at, name),
                           did_you_mean(str(name), by_name), key=True)
            continue
        if not fits(column.type, value):
            file.error("DSF-E884", f"the value {value!r} does not fit the column '{name}' ({column.type})",
                       (*at, name))


INTEGERS = ("BIGINT", "INT", "INTEGER", "SMALLINT", "TINYINT", "LONG")
NUMBERS = ("DOUBLE", "FLOAT", "REAL", "DECIMAL", "NUMERIC")
TEXTS = ("VARCHAR", "STRING", "CHAR", "TEXT")


def fits(sql_type: str, value: Any) -> bool:
    """Whether a YAML value can be a value of an SQL type (NULL fits every type)."""
    base = sql_type.strip().upper().split("(")[0].split("<")[0].strip()
    if value is None:
        return True
    if base in INTEGERS:
        return isinstance(value, int) and not isinstance(value, bool)
    if base in NUMBERS:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if base in TEXTS:
        return isinstance(value, str)
    if base == "BOOLEAN":
        return isinstance(value, bool)
    if base.startswith("TIMESTAMP") or base == "DATE":
        return isinstance(value, dt.date) or (isinstance(value, str) and _millis(value) is not None)
    if base == "ARRAY":
        return isinstance(value, list)
    if base in ("MAP", "STRUCT"):
        return isinstance(value, dict)
    return True


def _expected(file: _File, query: Query, raw: Any, at: tuple, keyed: bool) -> Expected | None:
    if not isinstance(raw, dict) or not raw or set(raw) <= {"ordered"}:
        file.error("DSF-E880", "'expect' gives rows, state, dead_letters or expectations", at)
        return None
    for key in set(raw) - EXPECT_KEYS:
        file.error("DSF-E880", f"unknown key '{key}' under expect", (*at, key), did_you_mean(str(key), EXPECT_KEYS),
                   True)
    sink = f"{'changelog or view' if keyed else 'stream'} {query.sink}"
    if "rows" in raw and keyed:
        file.error("DSF-E885", f"the query writes the {sink}: expect its 'state' by key, not 'rows'", (*at, "rows"),
                   key=True)
    if "state" in raw and not keyed:
        file.error("DSF-E885", f"the query writes the {sink}: expect its 'rows', not a 'state'", (*at, "state"),
                   key=True)
    rows = {k: _rows(file, query, raw[k], (*at, k)) for k in ("rows", "state", "dead_letters") if k in raw}
    rules = {r.name for r in query.expectations}
    if "dead_letters" in raw and not any(r.action == "dead_letter" for r in query.expectations):
        file.error("DSF-E885", f"the query {query.fqn} has no DEAD LETTER expectation", (*at, "dead_letters"),
                   key=True)
    counts = raw.get("expectations")
    if counts is not None:
        _check_counts(file, counts, rules, (*at, "expectations"))
    return Expected(rows=rows.get("rows"), ordered=raw.get("ordered") is True, state=rows.get("state"),
                    dead_letters=rows.get("dead_letters"), expectations=counts)


def _rows(file: _File, query: Query, raw: Any, at: tuple) -> tuple[dict, ...]:
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        file.error("DSF-E880", "expected rows are a list of mappings: column -> value", at)
        return ()
    allowed = frozenset({"_rule"}) if at[-1] == "dead_letters" else frozenset()
    for i, row in enumerate(raw):
        _check_row(file, query.output_columns, row, (*at, i), f"output of {query.fqn}", allowed)
    return tuple(raw)


def _check_counts(file: _File, counts: Any, rules: set[str], at: tuple) -> None:
    if not isinstance(counts, dict):
        file.error("DSF-E880", "'expectations' maps a rule's name to {passed: n, failed: n}", at)
        return
    for rule, wanted in counts.items():
        if rule not in rules:
            file.error("DSF-E885", f"the query has no expectation '{rule}'", (*at, rule),
                       did_you_mean(str(rule), rules), key=True)
        elif not isinstance(wanted, dict) or set(wanted) - {"passed", "failed"} or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in wanted.values()):
            file.error("DSF-E880", f"the counts of '{rule}' are {{passed: n, failed: n}}", (*at, rule))
