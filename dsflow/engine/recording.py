"""`dsflow test --record QUERY`: a query test made from a running environment, as SQLMesh's `create_test` makes one.

The inputs are the first records each source of the query holds in the environment's stores (read as `dsflow topic
print` reads them); the expected output is what the query, as the project declares it now, computes from them on
the engine (one arrival batch): a stream's rows, or a changelog's or view's final state by key, with its dead
letters and expectation counts when it has rules. The test is written to tests/NAME.yml, read back as `dsflow
test` reads it, and run once more: a query whose output from the same inputs changes between two runs is said to.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dsflow.core.engines import engine
from dsflow.core.model import Project, Query, Relation
from dsflow.core.suggest import did_you_mean
from dsflow.core.unittests import (Batch, Expected, Outcome, Record, Row, UnitTest, emitted_rows, final_state,
                                   normal)
from dsflow.errors import DsflowError, Location
from dsflow.load.unittests import FOLDER, load_tests


@dataclass(frozen=True)
class Recorded:
    """What `--record` wrote: the file, how many input records and expected rows, what it left out, and the test's
    outcome when run again from the file."""

    path: Path
    inputs: int
    expected: int
    left_out: int
    outcome: Outcome


def record(project: Project, query_name: str, limit: int, timeout: float, name: str | None = None) -> Recorded:
    """Record a test of the query named `query_name` into tests/NAME.yml (DSF-E888 if that file exists)."""
    query = find_query(project, query_name)
    test_name = name or f"recorded_{query.fqn.rsplit('.', 1)[-1]}"
    path = Path(project.root) / FOLDER / f"{test_name}.yml"
    if path.exists():
        raise DsflowError("DSF-E888", f"{path.relative_to(project.root)} exists: nothing was recorded",
                          hint="give another --name, or remove the file")
    inputs, left_out = {}, 0
    for source in query.sources:
        relation = project.relation(source.relation)
        assert relation is not None  # a loaded project's sources name its relations
        rows, skipped = source_rows(project, relation, limit, timeout)
        inputs[relation.fqn], left_out = rows, left_out + skipped
    sink = project.relation(query.sink)
    keyed = sink is not None and sink.kind != "stream"
    batch = {fqn: tuple(Record(values={k: v for k, v in r.items() if k != "_time"}, time_ms=r.get("_time"))
                        for r in rows) for fqn, rows in inputs.items()}
    probe = UnitTest(name=test_name, query=query.fqn, batches=(Batch(records=batch),), expected=Expected(),
                     location=Location(str(path)), keyed=keyed)
    observed = engine().observe_test(project, probe)
    expected = _expected(observed, keyed, bool(query.expectations))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(test_file(test_name, query.fqn, inputs, expected, project), encoding="utf-8")
    again = engine().unit_tests(project, load_tests(project, (test_name,)), lambda _: None)[0]
    shown = sum(len(v) for v in expected.values() if isinstance(v, list))
    return Recorded(path, sum(len(rows) for rows in inputs.values()), shown, left_out, again)


def find_query(project: Project, name: str) -> Query:
    """The query `name` means (its full name, a suffix of it, or its address); DSF-E881 if none or several."""
    text = name.removeprefix("query.")
    found = [q for q in project.queries if q.fqn == text or q.fqn.endswith("." + text)]
    if len(found) == 1:
        return found[0]
    if found:
        raise DsflowError("DSF-E881", f"'{name}' names several queries: {', '.join(q.fqn for q in found)}",
                          hint="write the query's full name")
    short = [q.fqn.rsplit(".", 1)[-1] for q in project.queries]
    raise DsflowError("DSF-E881", f"no query '{name}' in the project",
                      hint=did_you_mean(text.rsplit(".", 1)[-1], short) or "see 'dsflow graph'")


def source_rows(project: Project, relation: Relation, limit: int, timeout: float) -> tuple[list[Row], int]:
    """The first `limit` records the relation's log holds, as test records: the declared columns of each value
    (and `_time`, the record's time, when the relation has no 'timestamp' column); how many were left out (values
    that do not decode into a row, and tombstones)."""
    from dsflow.engine import topics

    target = topics.resolve(project, relation.fqn, relation.store)
    names = [c.name for c in relation.columns]
    rows, skipped = [], 0
    for found in topics.records(target, True, limit, timeout):
        value = found.get("value")
        if found.get("error") or not isinstance(value, dict):
            skipped += 1
            continue
        row = {n: normal(value.get(n)) for n in names}
        if relation.timestamp is None and found.get("timestamp") is not None:
            row["_time"] = int(found["timestamp"])
        rows.append(row)
    return rows, skipped


def _expected(observed: Any, keyed: bool, with_rules: bool) -> dict[str, Any]:
    found: dict[str, Any] = {"state": [normal(r) for r in final_state(observed)]} if keyed else \
        {"rows": [normal(r) for r in emitted_rows(observed)]}
    if observed.dead_letters:
        found["dead_letters"] = [normal(r) for r in observed.dead_letters]
    if with_rules:
        found["expectations"] = {rule: {k: int(v) for k, v in counts.items() if k in ("passed", "failed")}
                                 for rule, counts in observed.expectations.items()}
    return found


def test_file(name: str, query: str, inputs: dict[str, list[Row]], expected: dict[str, Any],
              project: Project) -> str:
    """The YAML of one recorded test, with a comment saying where and when it was recorded."""
    import yaml

    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = (f"# Recorded by `dsflow test --record {query}` from environment '{project.environment}' on {when}:\n"
              "# the inputs are the first records each source held; the expected output is what the query computed\n"
              "# from them then. Edit both to make it a test of the behaviour you mean.\n")
    body = {"tests": [{"name": name, "query": query, "inputs": inputs, "expect": expected}]}
    return header + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, default_flow_style=None, width=120)
