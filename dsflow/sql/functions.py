"""The scalar functions a continuous query may call: one allow-list, with a Spark mapping where names differ.

Each entry is a DeltaStream name, an example call (it is parsed to learn which sqlglot expressions the
name produces, and it is what docs/project.md lists), and, when Spark spells it differently, a rewrite.
A function not in the list is DSF-E143 at its file:line:col, with the closest allowed names as the
hint: it never reaches Spark. Operators (+ - * / %, ||, comparisons, AND/OR/NOT, LIKE, IN, BETWEEN,
IS [NOT] NULL), CASE and CAST are part of the grammar and always allowed. Aggregates are checked
with GROUP BY (sql/select.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import cast

from sqlglot import exp, parse_one

from dsflow.errors import Diagnostic, Location
from dsflow.core.suggest import did_you_mean

Report = Callable[[Diagnostic], None]

# name: (category, example call). The example must parse with the DeltaStream dialect.
FUNCTIONS: dict[str, tuple[str, str]] = {
    # string
    "UPPER": ("string", "UPPER(s)"), "LOWER": ("string", "LOWER(s)"), "INITCAP": ("string", "INITCAP(s)"),
    "TRIM": ("string", "TRIM(s)"), "LTRIM": ("string", "LTRIM(s)"), "RTRIM": ("string", "RTRIM(s)"),
    "SUBSTRING": ("string", "SUBSTRING(s, 2, 3)"), "SUBSTR": ("string", "SUBSTR(s, 2, 3)"),
    "CONCAT": ("string", "CONCAT(s, '-', t)"), "CONCAT_WS": ("string", "CONCAT_WS('-', s, t)"),
    "LENGTH": ("string", "LENGTH(s)"), "CHAR_LENGTH": ("string", "CHAR_LENGTH(s)"),
    "CHARACTER_LENGTH": ("string", "CHARACTER_LENGTH(s)"), "REPLACE": ("string", "REPLACE(s, 'a', 'b')"),
    "REGEXP_REPLACE": ("string", "REGEXP_REPLACE(s, '[0-9]+', '#')"),
    "REGEXP_EXTRACT": ("string", "REGEXP_EXTRACT(s, '([a-z]+)_([0-9]+)', 2)"),
    "REGEXP_LIKE": ("string", "REGEXP_LIKE(s, '^a')"), "REGEXP": ("string", "REGEXP(s, '^a')"),
    "LPAD": ("string", "LPAD(s, 8, '*')"), "RPAD": ("string", "RPAD(s, 8, '*')"),
    "REVERSE": ("string", "REVERSE(s)"), "REPEAT": ("string", "REPEAT(s, 2)"), "LEFT": ("string", "LEFT(s, 2)"),
    "RIGHT": ("string", "RIGHT(s, 2)"), "POSITION": ("string", "POSITION('a' IN s)"),
    "LOCATE": ("string", "LOCATE('a', s)"), "INSTR": ("string", "INSTR(s, 'a')"),
    "SPLIT_INDEX": ("string", "SPLIT_INDEX(s, ',', 0)"), "ASCII": ("string", "ASCII(s)"), "CHR": ("string", "CHR(65)"),
    "MD5": ("string", "MD5(s)"), "SHA1": ("string", "SHA1(s)"), "SHA256": ("string", "SHA256(s)"),
    "TO_BASE64": ("string", "TO_BASE64(s)"), "FROM_BASE64": ("string", "FROM_BASE64(s)"),
    "JSON_VALUE": ("string", "JSON_VALUE(s, '$.a')"), "UUID": ("string", "UUID()"),
    # math
    "ABS": ("math", "ABS(n)"), "ROUND": ("math", "ROUND(x, 2)"), "FLOOR": ("math", "FLOOR(x)"),
    "CEIL": ("math", "CEIL(x)"), "CEILING": ("math", "CEILING(x)"), "POWER": ("math", "POWER(n, 2)"),
    "POW": ("math", "POW(n, 2)"), "MOD": ("math", "MOD(n, 3)"), "SQRT": ("math", "SQRT(x)"), "EXP": ("math", "EXP(x)"),
    "LN": ("math", "LN(x)"), "LOG": ("math", "LOG(2, x)"), "LOG10": ("math", "LOG10(x)"), "LOG2": ("math", "LOG2(x)"),
    "SIGN": ("math", "SIGN(n)"), "PI": ("math", "PI()"), "GREATEST": ("math", "GREATEST(n, 1)"),
    "LEAST": ("math", "LEAST(n, 1)"), "RAND": ("math", "RAND()"),
    # date and time
    "FROM_UNIXTIME": ("date/time", "FROM_UNIXTIME(secs, 'yyyy-MM-dd HH:mm:ss')"),
    "UNIX_TIMESTAMP": ("date/time", "UNIX_TIMESTAMP(s, 'yyyy-MM-dd HH:mm:ss')"),
    "TO_TIMESTAMP": ("date/time", "TO_TIMESTAMP(s, 'yyyy-MM-dd HH:mm:ss')"),
    "TO_TIMESTAMP_LTZ": ("date/time", "TO_TIMESTAMP_LTZ(ms, 3)"), "TO_DATE": ("date/time", "TO_DATE(s)"),
    "DATE_FORMAT": ("date/time", "DATE_FORMAT(ts, 'yyyy-MM-dd')"), "EXTRACT": ("date/time", "EXTRACT(HOUR FROM ts)"),
    "YEAR": ("date/time", "YEAR(ts)"), "QUARTER": ("date/time", "QUARTER(ts)"), "MONTH": ("date/time", "MONTH(ts)"),
    "WEEKOFYEAR": ("date/time", "WEEKOFYEAR(ts)"),
    "DAYOFMONTH": ("date/time", "DAYOFMONTH(ts)"), "DAYOFWEEK": ("date/time", "DAYOFWEEK(ts)"),
    "DAYOFYEAR": ("date/time", "DAYOFYEAR(ts)"), "HOUR": ("date/time", "HOUR(ts)"),
    "MINUTE": ("date/time", "MINUTE(ts)"), "SECOND": ("date/time", "SECOND(ts)"),
    "DATE_TRUNC": ("date/time", "DATE_TRUNC('HOUR', ts)"), "DATEDIFF": ("date/time", "DATEDIFF(ts, ts)"),
    "DATE_ADD": ("date/time", "DATE_ADD(ts, 1)"), "TIMESTAMPDIFF": ("date/time", "TIMESTAMPDIFF(SECOND, ts, ts)"),
    "CURRENT_TIMESTAMP": ("date/time", "CURRENT_TIMESTAMP"), "CURRENT_DATE": ("date/time", "CURRENT_DATE"),
    "NOW": ("date/time", "NOW()"),
    # conditional and conversion
    "CASE": ("conditional", "CASE WHEN n > 1 THEN 'a' ELSE 'b' END"), "IF": ("conditional", "IF(n > 1, 'a', 'b')"),
    "COALESCE": ("conditional", "COALESCE(s, 'x')"), "NULLIF": ("conditional", "NULLIF(s, 'x')"),
    "IFNULL": ("conditional", "IFNULL(s, 'x')"), "NVL": ("conditional", "NVL(s, 'x')"),
    "CAST": ("conversion", "CAST(n AS VARCHAR)"), "TRY_CAST": ("conversion", "TRY_CAST(s AS BIGINT)"),
    # arrays
    "ARRAY": ("array", "ARRAY(1, 2)"), "CARDINALITY": ("array", "CARDINALITY(a)"), "SIZE": ("array", "SIZE(a)"),
    "ELEMENT_AT": ("array", "ELEMENT_AT(a, 1)"), "SPLIT": ("array", "SPLIT(s, ',')"),
}


RESULT_TYPES: dict[str, str] = {
    "TO_TIMESTAMP_LTZ": "TIMESTAMP", "DATE_TRUNC": "TIMESTAMP", "NOW": "TIMESTAMP", "YEAR": "INT",
    "WEEKOFYEAR": "INT", "TIMESTAMPDIFF": "BIGINT", "CARDINALITY": "INT", "REGEXP": "BOOLEAN",
    "FROM_BASE64": "VARCHAR",
}
"""The result type of the functions sqlglot types otherwise than Spark computes them (unknown, so VARCHAR, or
another width); tests/integration/test_function_types.py compares every function's type with Spark's."""


@dataclass(frozen=True)
class Declared:
    """A user-defined function's signature as a query's SQL sees it (CREATE FUNCTION, load/functions.py)."""

    name: str
    parameters: tuple[str, ...]
    """The parameters' SQL types, in order."""
    returns: str


DECLARED: ContextVar[Mapping[str, Declared]] = ContextVar("declared_functions", default=MappingProxyType({}))
"""The user-defined functions the SELECTs being resolved may call, by upper-case name (set by `declared_functions`)."""


@contextmanager
def declared_functions(functions: Mapping[str, Declared]) -> Iterator[None]:
    """Resolve SELECTs knowing these user-defined functions (by any case of name): known calls with their types."""
    token = DECLARED.set({name.upper(): f for name, f in functions.items()})
    try:
        yield
    finally:
        DECLARED.reset(token)


def declared(node: exp.Expr) -> Declared | None:
    """The user-defined function `node` calls, None if it is no call of one."""
    return DECLARED.get().get(node.name.upper()) if isinstance(node, exp.Anonymous) else None


def is_builtin(name: str) -> bool:
    """Whether `name` is a function of dsflow's list, or one sqlglot knows (it would not reach Spark as written)."""
    from dsflow.sql.parse import DIALECT

    if name.upper() in FUNCTIONS:
        return True
    try:
        call = cast(exp.Select, parse_one(f"SELECT {name}(1)", dialect=DIALECT)).selects[0]
    except Exception:  # noqa: BLE001  a name that is a keyword: not callable as a user function either
        return True
    return not isinstance(call, exp.Anonymous)


def _split_index(args: list[exp.Expr]) -> exp.Expr:
    """SPLIT_INDEX(s, sep, i): the i-th (0-based) part, NULL when there is none (Spark's SPLIT_PART is 1-based
    and gives '' instead)."""
    part = exp.func("SPLIT_PART", args[0], args[1], exp.Add(this=args[2].copy(), expression=exp.Literal.number(1)))
    return exp.func("NULLIF", part, exp.Literal.string(""))


def _to_timestamp_ltz(args: list[exp.Expr]) -> exp.Expr:
    """TO_TIMESTAMP_LTZ(n, precision): epoch seconds (0) or milliseconds (3, the default)."""
    precision = args[1].name if len(args) > 1 else "3"
    return exp.func("TIMESTAMP_SECONDS" if precision == "0" else "TIMESTAMP_MILLIS", args[0])


SPARK_REWRITES: dict[str, Callable[[list[exp.Expr]], exp.Expr]] = {
    "SPLIT_INDEX": _split_index,
    "TO_TIMESTAMP_LTZ": _to_timestamp_ltz,
    "SHA256": lambda a: exp.func("SHA2", a[0], exp.Literal.number(256)),
    "JSON_VALUE": lambda a: exp.func("GET_JSON_OBJECT", *a),
}
"""DeltaStream names Spark spells differently (the rest sqlglot writes in Spark's spelling itself)."""


ARITY: dict[str, tuple[int, int]] = {
    "SPLIT_INDEX": (3, 3), "TO_TIMESTAMP_LTZ": (1, 2), "SHA256": (1, 1), "JSON_VALUE": (2, 2), "REGEXP": (2, 2),
    "CARDINALITY": (1, 1), "NOW": (0, 0),
}
"""How many arguments the functions sqlglot does not know take (it checks the others while parsing)."""


@cache
def _allowed() -> tuple[frozenset[type], frozenset[str]]:
    """The sqlglot expression classes and the anonymous function names the examples produce."""
    from dsflow.sql.parse import DIALECT

    classes: set[type] = {exp.Cast, exp.TryCast, exp.Case, exp.If}  # grammar, not calls
    names: set[str] = set()
    for _, example in FUNCTIONS.values():
        for node in parse_one(f"SELECT {example}", dialect=DIALECT).find_all(exp.Func):
            if isinstance(node, exp.Anonymous):
                names.add(node.name.upper())
            else:
                classes.add(type(node))
    return frozenset(classes), frozenset(names)


@cache
def _result_types() -> tuple[dict[str, exp.DataType], dict[type, exp.DataType]]:
    """RESULT_TYPES by the anonymous function name or the sqlglot class each example call produces."""
    from dsflow.sql.parse import DIALECT

    names: dict[str, exp.DataType] = {}
    classes: dict[type, exp.DataType] = {}
    for name, type_text in RESULT_TYPES.items():
        node = cast(exp.Select, parse_one(f"SELECT {FUNCTIONS[name][1]}", dialect=DIALECT)).selects[0]
        data_type = exp.DataType.build(type_text)
        if isinstance(node, exp.Anonymous):
            names[node.name.upper()] = data_type
        else:
            classes[type(node)] = data_type
    return names, classes


def declare_result_types(select: exp.Expr) -> exp.Expr:
    """Type the calls of RESULT_TYPES (in place, before sqlglot's annotate_types, which keeps the types it finds
    and derives the enclosing expressions' types from them); returns `select`."""
    names, classes = _result_types()
    users = DECLARED.get()
    for node in select.find_all(exp.Func):
        user = users.get(node.name.upper()) if users and isinstance(node, exp.Anonymous) else None
        if user is not None:
            node.type = exp.DataType.build(user.returns)
            continue
        known = names.get(node.name.upper()) if isinstance(node, exp.Anonymous) else classes.get(type(node))
        if known is not None:
            node.type = known.copy()
    return select


def _written_name(node: exp.Func) -> str:
    return node.name.upper() if isinstance(node, exp.Anonymous) else node.sql_name()


def check_functions(select: exp.Expr, where: Callable[[exp.Expr], Location | None], report: Report) -> bool:
    """Report every function call outside the allow-list (DSF-E143); True if there is none."""
    from dsflow.sql.dialect import is_window

    classes, names = _allowed()
    OPERATORS = (exp.AggFunc, exp.Binary, exp.Connector, exp.Unary)  # noqa: N806
    ok = True
    for node in select.find_all(exp.Func):
        if isinstance(node, OPERATORS) or is_window(node) or any(map(is_window, _ancestors(node))) \
                or node.find_ancestor(exp.Version):  # FOR SYSTEM_TIME AS OF f(): DSF-E155 (sql/temporal.py)
            continue
        if isinstance(node, exp.Anonymous) and node.name.upper() in names:
            ok = _check_arguments(node, where, report) and ok
            continue
        user = declared(node)
        if user is not None and isinstance(node, exp.Anonymous):
            ok = _check_count(node, user, where, report) and ok
            continue
        if not isinstance(node, exp.Anonymous) and type(node) in classes:
            ok = _check_required(node, where, report) and ok
            continue
        name = _written_name(node)
        close = did_you_mean(name, [*FUNCTIONS, *DECLARED.get()]) or ""
        report(Diagnostic("DSF-E143", f"function {name} is not supported in continuous queries", where(node),
                          hint=(close + " " if close.startswith("did you mean") else "") +
                          "the supported functions are listed in docs/project.md (Functions)"))
        ok = False
    return ok


def _check_count(node: exp.Anonymous, user: Declared, where: Callable[[exp.Expr], Location | None],
                 report: Report) -> bool:
    """A call of a user-defined function with as many arguments as it declares parameters (DSF-E443)."""
    if len(node.expressions) == len(user.parameters):
        return True
    report(Diagnostic("DSF-E443", f"function {user.name} takes {len(user.parameters)} argument(s) "
                      f"({', '.join(user.parameters)}), got {len(node.expressions)}", where(node),
                      hint=f"call it as declared by its CREATE FUNCTION: {user.name}({', '.join(user.parameters)})"))
    return False


def _ancestors(node: exp.Expr) -> Iterator[exp.Expr]:
    while node.parent is not None:
        node = node.parent
        yield node


def _check_required(node: exp.Func, where: Callable[[exp.Expr], Location | None], report: Report) -> bool:
    """A call missing an argument sqlglot's parser let through (CEIL(), FLOOR(): parsed by their own rule, not
    checked) is DSF-E143 here; sqlglot's type annotation would fail on it."""
    if isinstance(node, (exp.Cast, exp.Case, exp.If)) or \
            all(node.args.get(k) is not None for k, required in node.arg_types.items() if required):
        return True
    name = _written_name(node)
    example = next((e for n, (_, e) in FUNCTIONS.items() if n == name), None)
    report(Diagnostic("DSF-E143", f"function {name} is missing an argument", where(node),
                      hint=f"e.g. {example}" if example else "the supported functions are listed in docs/project.md"))
    return False


def _check_arguments(node: exp.Anonymous, where: Callable[[exp.Expr], Location | None], report: Report) -> bool:
    name = node.name.upper()
    low, high = ARITY.get(name, (0, 99))
    count = len(node.expressions)
    precision = node.expressions[1] if name == "TO_TIMESTAMP_LTZ" and count == 2 else None
    if low <= count <= high and (precision is None or precision.sql() in ("0", "3")):
        return True
    takes = f"{low}" if low == high else f"{low} or {high}"
    problem = (f"takes {takes} argument{'s' if high != 1 else ''}, got {count}" if precision is None
               else f"takes a precision of 0 (seconds) or 3 (milliseconds), got {precision.sql()}")
    report(Diagnostic("DSF-E143", f"function {name} {problem}", where(node),
                      hint=f"e.g. {FUNCTIONS[name][1]}"))
    return False


def to_spark(select: exp.Expr, functions: Mapping[str, Declared] | None = None) -> exp.Expr:
    """Rewrite the DeltaStream names Spark spells differently (in place); returns `select`. Each argument of a call
    of one of `functions` (user-defined) is cast to its declared type: the function gets the types it declares."""
    for node in list(select.find_all(exp.Anonymous)):
        user = (functions or {}).get(node.name.lower())
        if user is not None:
            node.set("expressions", [exp.cast(a, exp.DataType.build(t)) for a, t in
                                     zip(node.expressions, user.parameters, strict=True)])
            continue
        rewrite = SPARK_REWRITES.get(node.name.upper())
        if rewrite is not None:
            node.replace(rewrite(list(node.expressions)))
    for decoded in list(select.find_all(exp.FromBase64)):  # DeltaStream gives text, Spark's UNBASE64 bytes
        if not isinstance(decoded.parent, exp.Cast):
            decoded.replace(exp.cast(decoded.copy(), "STRING"))
    return select
