"""The type checker of a continuous query: every expression of a resolved SELECT typed, and what Spark would refuse
for its types refused here, at its file:line:col (DSF-E400..E409).

It reads the tree sql/select.py resolved and annotated (sqlglot's annotate_types, the same typed tree the Spark
translator rewrites subscripts with): columns, struct fields, casts and the results of functions keep the types
sqlglot gives them; operators, comparisons, subscripts, CASE branches and aggregates are typed here, as Spark's
analyzer types them under ANSI mode (its default). Two kinds of problem:

- refused by Spark's analyzer (a subscript on a VARCHAR, a TIMESTAMP compared with a number, `NOT id`, a CASE whose
  branches are an ARRAY and a number, ...): the query would not start;
- accepted by the analyzer but failing when a row arrives (DSF-E402, DSF-E403): a string Spark must cast to
  another type implicitly, under ANSI a cast that fails on any value that does not convert, such as
  `id > 'x'` (BIGINT against a non-numeric literal) or `userid + 1` (a VARCHAR column in arithmetic).

A type it cannot tell (UNKNOWN from sqlglot, a function it has no rule for) is let through: refusing a valid query
is worse than letting Spark say it. What is not checked yet is listed in docs/validate.md.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dsflow.sql.dialect import SPARK
from dsflow.errors import Diagnostic
from dsflow.sql.typekinds import (
    ARRAY, INTERVAL, NULL, NUM, RUNTIME_CODES, STR, UNKNOWN, Problem, Typed, built, kind_of, text,
)
from dsflow.sql.typerules import Checker

__all__ = ["RUNTIME_CODES", "check_types"]

Report = Callable[[Diagnostic], None]


def check_types(select: exp.Select, columns: dict[tuple[str, str], exp.DataType], where, report: Report) -> bool:
    """Type every expression of the resolved SELECT, whose sources have `columns` ({(alias, name) in lower case:
    type}); report each problem (DSF-E400..E409); True if there is none."""
    checker = Checker(columns)
    for projection in select.selects:
        found = checker.infer(projection)
        if found.kind == INTERVAL:  # ts - ts: Spark computes it; no column type of a sink holds it
            checker.problems.append(Problem(
                "DSF-E410", projection, f"'{text(projection)}' is an INTERVAL (Spark's TIMESTAMP - TIMESTAMP); a "
                "result column cannot be one: no sink column type holds an INTERVAL",
                "give a number, e.g. TIMESTAMPDIFF(SECOND, a, b), or a TIMESTAMP, e.g. ts + INTERVAL 5 MINUTES"))
        corrected = _result_type(projection, found, checker.number(projection) if found.kind == NUM else None)
        if corrected is not None:  # the type the result column is declared with (sql/select.py)
            projection.type = corrected
    for key in ("where", "having"):
        clause = select.args.get(key)
        if clause is not None:
            checker.condition(clause.this, key.upper())
    for join in select.args.get("joins") or []:
        if join.args.get("on") is not None:
            checker.condition(join.args["on"], "ON")
    group = select.args.get("group")
    for item in group.expressions if group is not None else []:
        checker.infer(item)
    for problem in checker.problems:
        report(Diagnostic(problem.code, problem.message, where(problem.node), hint=problem.hint))
    return not checker.problems


def _result_type(projection: exp.Expr, found: Typed, width: exp.DataType | None) -> exp.DataType | None:
    """The type of a result column where sqlglot's differs from what Spark computes (tests/integration/test_typecheck.py
    compares them with Spark's): CONCAT or || of ARRAYs is an ARRAY (sqlglot: VARCHAR), LEFT/SUBSTRING/... of a number
    a VARCHAR (sqlglot: the number's type), a number Spark's type
    (`width`, sql/typewidths.py: `n * 2.5` DECIMAL(13, 1), sqlglot DOUBLE; `COALESCE(NULL, 1)` INT, sqlglot BIGINT),
    -NULL a DOUBLE (sqlglot: NULL), SUM/AVG of a TIMESTAMP or a NULL a DOUBLE (sqlglot: TIMESTAMP, NULL), ROUND of an
    integer that integer type (sqlglot: DOUBLE). None: sqlglot's type stands."""
    node = projection.this if isinstance(projection, exp.Alias) else projection
    while isinstance(node, exp.Paren):
        node = node.this
    declared = kind_of(projection.type)
    if found.kind == ARRAY and found.data_type is not None and declared != ARRAY:
        return found.data_type.copy()
    if found.kind == STR and found.data_type is not None and declared not in (STR, UNKNOWN):
        return found.data_type.copy()  # LEFT(x, 2) is a string (sqlglot: x's DOUBLE)
    if width is not None:
        same = projection.type is not None and (projection.type == width or
                                                projection.type.sql(dialect=SPARK) == width.sql(dialect=SPARK))
        return None if same else width.copy()
    if found.kind == NUM and found.data_type is not None and declared != NUM:
        return found.data_type.copy()  # SUM(ts), SUM(NULL): a DOUBLE (sqlglot: TIMESTAMP, NULL)
    if isinstance(node, exp.Neg) and declared == NULL:
        return built("DOUBLE")
    if isinstance(node, exp.Round) and found.data_type is not None and projection.type is not None and \
            declared == NUM and found.data_type.this != projection.type.this:
        return found.data_type.copy()
    return None
