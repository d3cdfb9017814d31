"""A query's expectations resolved against its result columns (DSF-E860..E865).

Each `CONSTRAINT name EXPECT (condition) ON VIOLATION action` (taken out of the statement by sql/expect_sql.py) is
parsed as a SQL expression over the columns the query writes and checked: unique rule names (DSF-E860), known
columns (DSF-E861), a BOOLEAN condition (DSF-E862; the type checker's own problems keep their codes), one row at a
time (no aggregate, window function or subquery: DSF-E863), a dead-letter topic for DEAD LETTER (DSF-E864). A
declared relation has no query to check (DSF-E865).
"""

from __future__ import annotations

from collections.abc import Callable

from dsflow.core.model import Column, Expectation
from dsflow.errors import Diagnostic, Location
from dsflow.sql.statements import RawExpectation
from dsflow.core.suggest import did_you_mean

Report = Callable[[Diagnostic], None]
HINT = "see Expectations in docs/project.md"


def resolve_expectations(raw: tuple[RawExpectation, ...], columns: tuple[Column, ...], dead_letters: bool,
                         report: Report) -> tuple[Expectation, ...]:
    """The rules that check out, in written order; every problem reported. `dead_letters`: the query has a
    dead-letter topic (DEAD LETTER needs one)."""
    resolved: list[Expectation] = []
    first: dict[str, RawExpectation] = {}
    for rule in raw:
        seen = first.setdefault(rule.name.lower(), rule)
        if seen is not rule:
            report(Diagnostic("DSF-E860", f"the expectation '{rule.name}' is declared twice in this query",
                              rule.location, hint=f"first declared at {seen.location}: rename or remove one"))
            continue
        if rule.action == "dead_letter" and not dead_letters:
            report(Diagnostic("DSF-E864", f"the expectation '{rule.name}' sends rows to the dead-letter topic, but "
                              "none of the query's sources is in a store whose dead-letter log takes rows",
                              rule.location, hint="use DROP ROW, WARN or FAIL QUERY"))
            continue
        condition = _checked_condition(rule, columns, report)
        if condition is not None:
            resolved.append(Expectation(name=rule.name, condition=condition, action=rule.action,  # type: ignore[arg-type]
                                        location=rule.location))
    return tuple(resolved)


def declared_without_query(raw: tuple[RawExpectation, ...], report: Report) -> None:
    """DSF-E865: expectations on a statement that declares a relation without a query."""
    for rule in raw:
        report(Diagnostic("DSF-E865", f"the expectation '{rule.name}' is on a declared relation: there is no query "
                          "whose rows it could check", rule.location,
                          hint="put expectations on CREATE ... AS SELECT or INSERT INTO ... SELECT"))


def _checked_condition(rule: RawExpectation, columns: tuple[Column, ...], report: Report) -> str | None:
    """The condition in DeltaStream SQL if it parses and checks out, else None (problems reported)."""
    from sqlglot import exp
    from sqlglot.errors import ParseError

    from dsflow.sql.parse import DIALECT, parse_one_select

    try:
        select = parse_one_select(f"SELECT {rule.condition}")
    except (ParseError, ValueError) as err:
        report(Diagnostic("DSF-E002", f"SQL syntax error in the expectation '{rule.name}': {err}",
                          rule.condition_location, hint=HINT))
        return None
    if not isinstance(select, exp.Select) or len(select.selects) != 1 or select.args.get("from_") is not None:
        report(Diagnostic("DSF-E002", f"the expectation '{rule.name}' needs one condition, e.g. EXPECT (amount > 0)",
                          rule.condition_location, hint=HINT))
        return None
    condition = select.selects[0]
    where = _locator(rule.condition_location)
    if not _row_level(rule, condition, where, report) or not _known_columns(rule, condition, columns, where, report):
        return None
    if not _typed(rule, select, columns, where, report):
        return None
    return condition.sql(dialect=DIALECT)


def _locator(start: Location) -> Callable:
    """Where a node of the condition is in the file (the condition was parsed as `SELECT <condition>`)."""
    from dsflow.sql.parse import node_location

    def where(node) -> Location:
        found = node_location(start.file, node, start)
        if found.line == 1:
            return Location(start.file, start.line, start.col + max(0, found.col - len("SELECT ") - 1))
        return Location(start.file, start.line + found.line - 1, found.col)

    return where


def _row_level(rule: RawExpectation, condition, where, report: Report) -> bool:
    from sqlglot import exp

    found = next(iter(condition.find_all(exp.AggFunc, exp.Window, exp.Subquery, exp.Select)), None)
    if found is None:
        return True
    report(Diagnostic("DSF-E863", f"the expectation '{rule.name}' checks one row at a time: "
                      f"'{found.sql()}' is not allowed in it", where(found),
                      hint="compare the row's own columns; an aggregate belongs in the query"))
    return False


def _known_columns(rule: RawExpectation, condition, columns: tuple[Column, ...], where, report: Report) -> bool:
    from sqlglot import exp

    names = {c.name.lower() for c in columns}
    ok = True
    for column in condition.find_all(exp.Column):
        if column.table or column.name.lower() not in names:
            written = column.sql()
            report(Diagnostic("DSF-E861", f"the expectation '{rule.name}' reads '{written}', which is not a column "
                              "of the query's result", where(column),
                              hint=did_you_mean(column.name, [c.name for c in columns])))
            ok = False
    return ok


def _typed(rule: RawExpectation, select, columns: tuple[Column, ...], where, report: Report) -> bool:
    """The condition's functions allowed and its types right (sql/typecheck.py's checker), and BOOLEAN."""
    from sqlglot import exp

    from dsflow.sql.functions import check_functions, declare_result_types
    from dsflow.sql.typekinds import BOOL, UNKNOWN
    from dsflow.sql.typerules import Checker

    if not check_functions(select, where, report):
        return False
    declare_result_types(select)
    checker = Checker({("", c.name.lower()): exp.DataType.build(c.type) for c in columns})
    condition = select.selects[0]
    found = checker.infer(condition)
    for problem in checker.problems:
        report(Diagnostic(problem.code, problem.message, where(problem.node), hint=problem.hint))
    if checker.problems:
        return False
    if found.kind in (BOOL, UNKNOWN):
        return True
    report(Diagnostic("DSF-E862", f"the expectation '{rule.name}' needs a BOOLEAN condition, but "
                      f"'{condition.sql()}' is {found.show()}", where(condition),
                      hint="compare it, e.g. amount > 0, or name IS NOT NULL"))
    return False
