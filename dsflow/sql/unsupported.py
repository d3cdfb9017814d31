"""SQL that parses but that dsflow would otherwise accept and ignore: each is rejected with its own code.

    CREATE OR REPLACE ...                    DSF-E150  plan/apply decide whether a relation is replaced
    CREATE ... IF NOT EXISTS ...             DSF-E151  plan/apply decide whether a relation is created
    col TYPE NOT NULL (DEFAULT, CHECK, ...)  DSF-E152  nothing would enforce it (COMMENT and PRIMARY KEY are kept)
    SELECT DISTINCT ...                      DSF-E153  Spark cannot run it on a stream; GROUP BY into a changelog can
    ... (WITH x AS (...) SELECT ...) ...      DSF-E154  a CTE inside a subquery (not DSF-E040 for the CTE's name);
                                                       a top-level CTE is inlined (sql/ctes.py)
    JOIN c FOR SYSTEM_TIME AS OF s.col       DSF-E155  unless it is a temporal join's changelog at a stream column
                                                       (sql/temporal.py: then it sets the stream's event time)

Statement-level checks run when a statement is parsed (sql/parse.py), SELECT-level ones when it is resolved
(sql/select.py). See docs/errors.md.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dsflow.errors import Diagnostic, Location

Report = Callable[[Diagnostic], None]
Where = Callable[[exp.Expr], Location]
REPLACEMENT_HINT = ("remove it: dsflow plan compares the statement with what is deployed and decides whether to "
                    "create, update or replace it; dsflow apply carries that out")
KEPT_CONSTRAINTS = (exp.CommentColumnConstraint, exp.PrimaryKeyColumnConstraint)
"""Column constraints that mean something to dsflow: a comment, and an inline PRIMARY KEY (sql/parse.py)."""


def meaningless_clauses(create: exp.Expr | None, start: Location, where: Where) -> list[Diagnostic]:
    """DSF-E150..E152 for a CREATE statement: OR REPLACE, IF NOT EXISTS, and column constraints nothing enforces."""
    if not isinstance(create, exp.Create):
        return []
    problems = []
    if create.args.get("replace"):
        problems.append(Diagnostic("DSF-E150", "CREATE OR REPLACE is not supported", start, hint=REPLACEMENT_HINT))
    if create.args.get("exists"):
        problems.append(Diagnostic("DSF-E151", "IF NOT EXISTS is not supported", start, hint=REPLACEMENT_HINT))
    target = create.this
    for column in target.expressions if isinstance(target, exp.Schema) else ():
        if not isinstance(column, exp.ColumnDef):
            continue
        for constraint in column.args.get("constraints") or ():
            if isinstance(constraint.args.get("kind"), KEPT_CONSTRAINTS):
                continue
            problems.append(Diagnostic(
                "DSF-E152", f"column constraint {constraint.sql(dialect='spark')} on '{column.name}' is not "
                "supported: dsflow would not enforce it", where(column.this),
                hint=f"remove it; to drop records where {column.name} is null, write WHERE {column.name} IS NOT NULL "
                     "in the query that reads this relation"))
    return problems


def is_cte_name(table: exp.Table) -> bool:
    """Whether `table` names a CTE of an enclosing SELECT (`WITH x AS (...) ... FROM x`) rather than a relation."""
    if table.db:
        return False
    node: exp.Expr | None = table
    while node is not None:
        with_ = node.args.get("with_")
        if isinstance(with_, exp.With) and any(cte.alias_or_name == table.name for cte in with_.expressions):
            return True
        node = node.parent
    return False


def check_select_surface(select: exp.Expr, where: Where, report: Report) -> bool:
    """DSF-E154 for a CTE left after inlining (inside a subquery), DSF-E153 for SELECT DISTINCT (anywhere in the
    SELECT); True if there is neither."""
    with_ = select.find(exp.With)
    if with_ is not None:
        report(Diagnostic("DSF-E154", "a CTE (WITH name AS (SELECT ...)) inside a subquery is not supported in "
                          "continuous queries", where(with_), hint="move it to the top of the query, where a CTE "
                          "that projects and filters one relation is inlined, or write its SELECT as its own "
                          "CREATE STREAM|CHANGELOG ... AS SELECT and read that relation"))
        return False
    for node in select.find_all(exp.Select):
        if node.args.get("distinct") is not None:
            first = node.selects[0] if node.selects else node
            report(Diagnostic("DSF-E153", "SELECT DISTINCT is not supported in continuous queries", where(first),
                              hint="to keep one row per distinct value, write CREATE CHANGELOG ... AS SELECT cols "
                                   "FROM ... GROUP BY cols; to drop repeated events, filter them upstream"))
            return False
    return True
