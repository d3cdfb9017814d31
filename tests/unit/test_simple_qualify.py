"""sql/simple.py's one-walk qualify beside sqlglot's qualify on generated SELECTs: where it takes a SELECT, the tree it
leaves is qualify's node for node (types, arguments, meta, which identifiers are shared), and so are the types
annotate_types then gives and the SQL written. What it refuses is left untouched for qualify."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp, parse_one
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from dsflow.sql.parse import DIALECT
from dsflow.sql.select import _schema_name, _schema_type
from dsflow.sql.simple import qualify_simple

COLUMNS = {"id": "BIGINT", "ts": "TIMESTAMP", "user_id": "VARCHAR", "Amount": "DOUBLE", "kind": "VARCHAR",
           "n": "INT", "price": "DECIMAL(10, 2)", "ok": "BOOLEAN"}
NAMES = [*COLUMNS, "ID", "AMOUNT", "Kind"]
ALIASES = ["a", "id", "kind", "Total", "x_1", "amount", "ts"]
TYPES = ["BIGINT", "VARCHAR", "DOUBLE", "DECIMAL(10, 2)", "INT", "TIMESTAMP", "BOOLEAN", "STRING"]
LITERALS = ["1", "0", "42", "1.5", "1e3", "'x'", "'A b'", "TRUE", "FALSE", "NULL"]
BINARY = ["+", "-", "*", "/", "%", "=", "<>", "!=", ">", ">=", "<", "<=", "AND", "OR", "||"]
# "- {}", not "-{}": a negation of "-1" written "--1" is a comment to the end of the line
UNARY = ["NOT {}", "- {}", "({})", "{} IS NULL", "{} IS NOT NULL", "UPPER({})", "LOWER({})", "ABS({})",
         "LENGTH({})", "ROUND({}, 1)", "SQRT({})"]
BINARY_CALLS = ["COALESCE({}, {})", "CONCAT({}, {})", "CASE WHEN {} THEN {} END", "IF({}, {}, 1)"]


@st.composite
def columns(draw, qualifiers: list[str]) -> str:
    name = draw(st.sampled_from(NAMES))
    if draw(st.integers(0, 29)) == 0:
        name = f"`{name}`" if draw(st.booleans()) else "missing"
    table = draw(st.sampled_from([None, None, *qualifiers]))
    return f"{table}.{name}" if table else name


def _operand(text: str) -> str:
    return text if " " not in text or text.endswith(")") and text.startswith(("(", "UPPER", "LOWER", "ABS")) \
        else f"({text})"


def expressions(qualifiers: list[str]):
    leaves = st.one_of(columns(qualifiers), st.sampled_from(LITERALS))
    return st.recursive(leaves, lambda inner: st.one_of(
        st.builds(lambda a, op, b: f"{_operand(a)} {op} {_operand(b)}", inner, st.sampled_from(BINARY), inner),
        st.builds(lambda f, a: f.format(_operand(a)), st.sampled_from(UNARY), inner),
        st.builds(lambda f, a, b: f.format(a, b), st.sampled_from(BINARY_CALLS), inner, inner),
        st.builds(lambda a, t: f"CAST({a} AS {t})", inner, st.sampled_from(TYPES)),
    ), max_leaves=6)


@st.composite
def selects(draw) -> str:
    table, alias = draw(st.sampled_from([("s0", None), ("S0", None), ("s0", "t"), ("s0", "T"), ("`s0`", None)]))
    qualifiers = [q for q in (alias, table, "T", "other") if q]
    projections = []
    for _ in range(draw(st.integers(1, 4))):
        item = draw(st.one_of(columns(qualifiers), expressions(qualifiers)))
        name = draw(st.sampled_from([None, None, *ALIASES]))
        projections.append(f"{item} AS {name}" if name else item)
    if draw(st.integers(0, 19)) == 0:
        projections.append(draw(st.sampled_from(["*", "t.*", "COUNT(*) AS c"])))
    text = f"SELECT {', '.join(projections)} FROM {table}{' ' + alias if alias else ''}"
    if draw(st.booleans()):
        text += f" WHERE {draw(expressions(qualifiers))}"
    return text


def _parsed(text: str) -> tuple[exp.Select, dict]:
    select = parse_one(text, dialect=DIALECT)
    for table in select.find_all(exp.Table):
        for part, value in zip(("catalog", "db", "this"), ("scale", "public", "s0"), strict=True):
            table.set(part, exp.to_identifier(value))
    columns = {_schema_name(name, False): _schema_type(type_) for name, type_ in COLUMNS.items()}
    return select, columns


def _schema(columns: dict) -> MappingSchema:
    return MappingSchema({"scale": {"public": {"s0": columns}}}, dialect=DIALECT, normalize=False)


def _same(fast: exp.Expr, slow: exp.Expr, pairs: dict[int, int]) -> None:
    """The two trees are equal node for node, and share their nodes alike."""
    assert pairs.setdefault(id(fast), id(slow)) == id(slow), "a node shared differently"
    assert type(fast) is type(slow) and fast.meta == slow.meta and fast.comments == slow.comments
    assert (fast.type.sql() if fast.type else None) == (slow.type.sql() if slow.type else None)
    assert (fast.arg_key, fast.index) == (slow.arg_key, slow.index)
    keys = {k for k, v in fast.args.items() if v is not None and v != []}
    assert keys == {k for k, v in slow.args.items() if v is not None and v != []}, (fast, slow)
    for key in keys:
        a, b = fast.args[key], slow.args[key]
        if isinstance(a, list):
            assert len(a) == len(b)
            pairs_ = zip(a, b, strict=True)
        else:
            pairs_ = [(a, b)]
        for x, y in pairs_:
            if isinstance(x, exp.Expr):
                _same(x, y, pairs)
            else:
                assert x == y and type(x) is type(y)


def _parents_alike(fast: exp.Expr, pairs: dict[int, int], slow_nodes: dict[int, exp.Expr]) -> None:
    for node in fast.walk():
        mapped = slow_nodes[pairs[id(node)]]
        assert (node.parent is None) == (mapped.parent is None)
        if node.parent is not None:
            assert pairs[id(node.parent)] == id(mapped.parent)


def _compare(text: str) -> bool:
    """True if qualify_simple took the SELECT (and then left qualify's tree), False if it refused it untouched."""
    fast, columns = _parsed(text)
    slow, _ = _parsed(text)
    before = repr(fast)
    if not qualify_simple(fast, columns):
        assert repr(fast) == before, "a refused SELECT was changed"
        return False
    schema = _schema(columns)
    try:
        slow = qualify(slow, schema=schema, dialect=DIALECT)
    except OptimizeError as err:
        raise AssertionError(f"qualify refuses what qualify_simple took: {err}") from err
    pairs: dict[int, int] = {}
    _same(fast, slow, pairs)
    _parents_alike(fast, pairs, {id(n): n for n in slow.walk()})
    for tree in (fast, slow):
        annotate_types(tree, schema=schema, dialect=DIALECT, overwrite_types=False)
    _same(fast, slow, {})
    assert fast.sql(dialect=DIALECT) == slow.sql(dialect=DIALECT)
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(selects())
def test_simple_qualify_is_qualify(text: str) -> None:
    _compare(text)


TAKEN = [
    "SELECT id, ts, UPPER(user_id) AS user_id, amount * 1.1 AS amount, kind FROM s0 WHERE amount > 3 "
    "AND kind <> 'test'",
    "SELECT ID, t.Kind, -n AS m, (amount), amount + 1, CAST(price AS VARCHAR) AS p FROM S0 AS T WHERE NOT ok",
    "SELECT COALESCE(user_id, 'x') AS u, LENGTH(kind) AS l, ABS(n) % 2 = 1 AS odd FROM s0 t WHERE id IS NOT NULL",
]
REFUSED = [
    "SELECT id, COUNT(*) AS c FROM s0 GROUP BY id", "SELECT * FROM s0", "SELECT `id` FROM s0",
    "SELECT s0.id FROM s0 AS t", "SELECT ROUND(amount, 1) AS r FROM s0", "SELECT id FROM s0 WHERE missing > 1",
    "SELECT DISTINCT id FROM s0", "SELECT id /* the key */ FROM s0", "SELECT CAST(id AS DECIMAL(10, 2)) AS d FROM s0",
]


def test_which_selects_take_the_one_walk() -> None:
    assert all(_compare(text) for text in TAKEN)
    assert not any(_compare(text) for text in REFUSED)


def test_every_select_of_the_example_projects_and_a_benchmark_project_resolves_the_same_both_ways(tmp_path,
                                                                                                   monkeypatch):
    """The CI slice of tests/support/resolve_replay.py (run by hand over every project the unit tests load): each
    SELECT of the example projects and of a generated 400-relation benchmark project resolved by the one walk and by
    qualify alone, results, diagnostics and trees compared."""
    import sys

    from dsflow.load.project import load_project
    from support import resolve_replay
    from support.projects import REPO

    sys.path.insert(0, str(REPO))
    from bench.plan_scale import write_dsflow_project

    monkeypatch.setenv("DSFLOW_CACHE", "0")
    monkeypatch.setenv("DSFLOW_LOAD_WORKERS", "1")
    resolve_replay.COUNTS.clear()
    resolve_replay.DIFFERENCES.clear()
    roots = [REPO / "example_project", REPO / "templates", write_dsflow_project(tmp_path / "bench", 400)]
    undo = resolve_replay.install()
    try:
        for root in roots:
            load_project(root, variables={"bootstrap": "127.0.0.1:9"})
    finally:
        undo()
    assert resolve_replay.DIFFERENCES == []
    assert resolve_replay.COUNTS["one walk"] >= 200 and resolve_replay.COUNTS["refused by the one walk"] > 0, \
        resolve_replay.COUNTS
