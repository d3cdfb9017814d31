"""CTEs: `WITH x AS (SELECT ... FROM s WHERE ...) SELECT ... FROM x ...`, inlined before the SELECT is resolved.

A CTE that projects and filters one relation (or an earlier CTE) is inlined into each place that reads it: the
reference `x [AS a]` becomes `s AS a` (the reference's name kept as the alias), each column of x read there
becomes the CTE's expression for it, and the CTE's WHERE joins the reading SELECT's WHERE. The result is an
ordinary query of the forms sql/select.py resolves (projection, filter, window, GROUP BY, joins).

A CTE that joins (and projects and filters the join) is inlined where it is the one relation a SELECT reads: its
FROM and joins become that SELECT's (`FROM TUMBLE(x, ...)` windows the join's first relation: sql/windowed_join.py).
So is a subquery that joins, read as the one relation of a SELECT (`inline_joined_subquery`, sql/nested.py). A
CTE that aggregates a window is read as a subquery in each place that reads it (sql/nested.py).

Refused with DSF-E173: a CTE that joins where it is not the one relation read, or selects * over a join; one
that groups (but for a window), aggregates, windows, unnests, orders, limits, uses DISTINCT or a UNION, or names its
columns (`WITH x(a, b) AS`); WITH RECURSIVE. DSF-E174: a CTE with a WHERE read on a side
of an outer join whose rows the join keeps (its filter would not mean the same after the join), and
`SELECT *` over a CTE joined to another relation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from sqlglot import exp

from dsflow.core.model import Relation
from dsflow.errors import Diagnostic
from dsflow.sql.dialect import SOURCE_PROPERTIES, is_window

Report = Callable[[Diagnostic], None]
HINT = ("a CTE is inlined when it projects and filters one relation; write anything else as its own "
        "CREATE STREAM|CHANGELOG ... AS SELECT, and read that relation")
WINDOW_COLUMNS = ("window_start", "window_end")
CLAUSES = {"joins": "joins", "group": "GROUP BY", "having": "HAVING", "distinct": "DISTINCT", "order": "ORDER BY",
           "limit": "LIMIT", "with_": "a nested WITH", "qualify": "QUALIFY"}


def inline_ctes(select: exp.Query, relations: dict[str, Relation], qualify_name, where, report: Report) -> bool:
    """Inline every CTE of `select` in place (its WITH removed); False if one cannot be (reported)."""
    with_: exp.With = select.args["with_"]
    if with_.args.get("recursive"):
        report(Diagnostic("DSF-E173", "WITH RECURSIVE is not supported in continuous queries", where(with_),
                          hint=HINT))
        return False
    bodies: dict[str, exp.Select] = {}
    for cte in with_.expressions:
        if windowed_aggregation(cte):  # read as a subquery where it is read (sql/nested.py)
            if not _inline_into(cte.this, bodies, relations, qualify_name, where, report):
                return False
            _as_subqueries(select, cte)
            continue
        problem = _problem(cte)
        if problem is not None:
            report(Diagnostic("DSF-E173", f"the CTE '{cte.alias_or_name}' {problem}: it cannot be inlined",
                              where(cte), hint=HINT))
            return False
        if not _inline_into(cte.this, bodies, relations, qualify_name, where, report):
            return False
        bodies[cte.alias_or_name.lower()] = cte.this
    select.set("with_", None)
    return _inline_into(select, bodies, relations, qualify_name, where, report)


def windowed_aggregation(cte: exp.CTE) -> bool:
    """A CTE that aggregates a window (`SELECT ... FROM TUMBLE(s, ...) GROUP BY window_start, ...`)."""
    body = cte.this
    return isinstance(body, exp.Select) and body.args.get("group") is not None and not cte.args["alias"].columns \
        and body.args.get("from_") is not None and is_window(body.args["from_"].this)


def _as_subqueries(select: exp.Query, cte: exp.CTE) -> None:
    """Each place that reads the CTE reads its SELECT as a subquery, under the reference's name."""
    for table in list(select.find_all(exp.Table)):
        if not table.db and not is_window(table) and table.name.lower() == cte.alias_or_name.lower() \
                and isinstance(table.parent, (exp.From, exp.Join)):
            table.replace(exp.Subquery(this=cte.this.copy(),
                                       alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))))


def _problem(cte: exp.CTE) -> str | None:
    """Why a CTE is not a projection/filter of one relation, or None."""
    body = cte.this
    if not isinstance(body, exp.Select):
        return f"is a {type(body).__name__.upper()}, not a SELECT"
    if cte.args["alias"].columns:
        return "names its columns (WITH x(a, b) AS ...); name them with AS inside its SELECT instead"
    for key, what in CLAUSES.items():
        if body.args.get(key) and key != "joins":
            return f"has {what}"
    if body.args.get("joins") and any(isinstance(p, exp.Star) or (isinstance(p, exp.Column) and p.is_star)
                                      for p in body.selects):
        return "joins and selects *; list its columns"
    table = body.args["from_"].this if body.args.get("from_") else None
    if not isinstance(table, exp.Table) or is_window(table):
        return "does not read one relation (a window, a subquery or a table function)"
    for node, what in ((exp.AggFunc, "an aggregate"), (exp.Window, "a window function"), (exp.Subquery, "a subquery"),
                       (exp.Unnest, "UNNEST")):
        if body.find(node) is not None:
            return f"has {what}"
    return None


def _inline_into(root: exp.Expr, bodies: dict[str, exp.Select], relations: dict[str, Relation], qualify_name,
                 where, report: Report) -> bool:
    references = [t for t in root.find_all(exp.Table)
                  if not t.db and not is_window(t) and t.name.lower() in bodies]
    for table in references:
        if not _inline_one(table, bodies[table.name.lower()], relations, qualify_name, where, report):
            return False
    return True


def _inline_one(table: exp.Table, body: exp.Select, relations: dict[str, Relation], qualify_name, where,
                report: Report) -> bool:
    alias, scope = table.alias_or_name, table.find_ancestor(exp.Select)
    assert scope is not None  # a table is read in a SELECT's FROM or JOIN
    if body.args.get("joins"):
        return _inline_join(table, body, scope, relations, qualify_name, where, report)
    inner: exp.Table = body.args["from_"].this
    mapping = _mapping(body, inner.alias_or_name, alias, relations, qualify_name)
    condition = _requalified(body.args["where"].this, inner.alias_or_name, alias) if body.args.get("where") else None
    if not _fits(table, scope, condition is not None, where, report) or \
            not _replace_columns(scope, alias, mapping, relations, qualify_name, where, report):
        return False
    replacement = inner.copy()
    replacement.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    if table.args.get(SOURCE_PROPERTIES):
        replacement.set(SOURCE_PROPERTIES, table.args[SOURCE_PROPERTIES])
    outer = table.parent.parent if isinstance(table.parent, exp.Anonymous) else None
    if outer is not None and is_window(outer) and not outer.alias:  # TUMBLE(x, ...): the window keeps x's name
        outer.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    table.replace(replacement)
    if condition is not None:
        scope.where(condition, copy=False)
    return True


def inline_joined_subquery(select: exp.Select, relations: dict[str, Relation], qualify_name, where,
                           report: Report) -> bool:
    """`FROM (SELECT ... FROM a JOIN b ...) AS x`, the one relation a SELECT reads: inlined as a CTE that joins is;
    False if it cannot be (reported)."""
    item = select.args["from_"].this
    cte = exp.CTE(this=item.this, alias=exp.TableAlias(this=exp.to_identifier(item.alias_or_name)))
    problem = _problem(cte)
    if problem is not None:
        report(Diagnostic("DSF-E045", f"the subquery '{item.alias_or_name}' {problem}: it cannot be read as the join "
                          "it makes", where(item), hint=HINT))
        return False
    reference = exp.Table(this=exp.to_identifier(item.alias_or_name))
    item.replace(reference)
    return _inline_join(reference, cte.this, select, relations, qualify_name, where, report)


def _inline_join(table: exp.Table, body: exp.Select, scope: exp.Select, relations: dict[str, Relation], qualify_name,
                 where, report: Report) -> bool:
    """A CTE that joins, read as the one relation of a SELECT (windowed or not: `TUMBLE(x, ..)` windows the join's
    first relation): its FROM and joins become the SELECT's, its WHERE joins the SELECT's."""
    outer = table.parent.parent if isinstance(table.parent, exp.Anonymous) else None
    window = outer if outer is not None and is_window(outer) else None
    if scope.args.get("joins") or (window or table).parent is not scope.args.get("from_"):
        report(Diagnostic("DSF-E173", f"the CTE '{table.name}' joins: it is inlined only where it is the one "
                          "relation a SELECT reads (FROM x or FROM TUMBLE(x, ...), without another JOIN)",
                          where(table), hint=HINT))
        return False
    mapping = {p.alias_or_name.lower(): cast(exp.Alias, exp.alias_(p.unalias().copy(), p.alias_or_name))
               for p in body.selects}
    if not _replace_columns(scope, table.alias_or_name, mapping, relations, qualify_name, where, report):
        return False
    first: exp.Table = body.args["from_"].this.copy()
    if window is not None:
        window.set("alias", exp.TableAlias(this=exp.to_identifier(first.alias_or_name)))
    table.replace(first)
    scope.set("joins", [j.copy() for j in body.args["joins"]])
    if body.args.get("where"):
        scope.where(body.args["where"].this.copy(), copy=False)
    return True


def _mapping(body: exp.Select, inner: str, alias: str, relations: dict[str, Relation],
             qualify_name) -> dict[str, exp.Alias]:
    """The CTE's output columns by lower-cased name: `expression AS name`, over the relation read as `alias`."""
    mapping: dict[str, exp.Alias] = {}
    for projection in body.selects:
        if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star):
            relation = relations.get(qualify_name([p.name for p in body.args["from_"].this.parts]))
            for column in relation.columns if relation is not None else ():
                mapping[column.name.lower()] = cast(exp.Alias, exp.alias_(exp.column(column.name, table=alias),
                                                                          column.name))
            continue
        mapping[projection.alias_or_name.lower()] = cast(exp.Alias, exp.alias_(  # an alias given: an Alias
            _requalified(projection.unalias(), inner, alias), projection.alias_or_name))
    return mapping


def _requalified(node: exp.Expr, inner: str, alias: str) -> exp.Expr:
    """A copy of `node` whose columns of the CTE's relation (qualified by `inner`, or not at all) read `alias`."""
    node = node.copy()
    for column in [node] if isinstance(node, exp.Column) else list(node.find_all(exp.Column)):
        if not column.table or column.table.lower() == inner.lower():
            column.set("table", exp.to_identifier(alias))
    return node


def _fits(table: exp.Table, scope: exp.Select, filtered: bool, where, report: Report) -> bool:
    """DSF-E174 for a filtered CTE on a side an outer join keeps, and for SELECT * over a CTE in a join."""
    join = table.parent if isinstance(table.parent, exp.Join) else None
    side = (join.side or "").upper() if join else ""
    first_join = (scope.args.get("joins") or [None])[0]
    full = first_join is not None and (first_join.side or "").upper() == "FULL"
    if filtered and (side in ("LEFT", "FULL") or (join is None and full)):
        report(Diagnostic("DSF-E174", f"the CTE '{table.name}' filters rows on a side of an outer join that keeps "
                          "all of its rows: its WHERE cannot be inlined", where(table),
                          hint="write the CTE as its own CREATE STREAM|CHANGELOG ... AS SELECT and join that"))
        return False
    stars = [p for p in scope.selects if isinstance(p, exp.Star)]
    if stars and scope.args.get("joins"):
        report(Diagnostic("DSF-E174", f"SELECT * over the CTE '{table.name}' and another relation cannot be inlined",
                          where(stars[0]), hint=f"list the columns, e.g. {table.alias_or_name}.col"))
        return False
    return True


def _replace_columns(scope: exp.Select, alias: str, mapping: dict[str, exp.Alias], relations: dict[str, Relation],
                     qualify_name, where, report: Report) -> bool:
    """Each column of the CTE read in `scope` becomes its expression (a bare projection keeps its name)."""
    others = _other_columns(scope, alias, relations, qualify_name)
    if any(is_window(t) for t in scope.find_all(exp.Table)):
        others |= set(WINDOW_COLUMNS)
    for column in list(scope.find_all(exp.Column)):
        if column.is_star or (column.table and column.table.lower() != alias.lower()):
            continue
        name = column.name.lower()
        if name in WINDOW_COLUMNS and name in others:
            continue  # TUMBLE(x, ...)/HOP(x, ...): the window's own columns
        if not column.table and (name in others or (name not in mapping and _output_name(column, scope))):
            continue  # another relation's column (an ambiguous one is reported when the SELECT is resolved)
        if name not in mapping:
            report(Diagnostic("DSF-E041", f"unknown column '{column.name}' in the CTE '{alias}'", where(column),
                              hint=f"its columns: {', '.join(a.alias for a in mapping.values())}"))
            return False
        value = mapping[name].this.copy()
        bare = isinstance(column.parent, exp.Select) and column.arg_key == "expressions"
        column.replace(exp.alias_(value, column.name, copy=False) if bare else value)
    _expand_star(scope, alias, mapping)
    return True


def _expand_star(scope: exp.Select, alias: str, mapping: dict[str, exp.Alias]) -> None:
    """`SELECT *` (or `x.*`) over a CTE: its columns, named."""
    for index, projection in enumerate(list(scope.selects)):
        if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star
                                                and projection.table.lower() == alias.lower()):
            expanded = [a.copy() for a in mapping.values()]
            scope.set("expressions", scope.selects[:index] + expanded + scope.selects[index + 1:])
            return


def _output_name(column: exp.Column, scope: exp.Select) -> bool:
    """A GROUP BY naming an output column of the SELECT itself."""
    return column.find_ancestor(exp.Group) is not None and \
        column.name.lower() in {p.alias_or_name.lower() for p in scope.selects}


def _other_columns(scope: exp.Select, alias: str, relations: dict[str, Relation], qualify_name) -> set[str]:
    """Lower-cased column names of the other relations `scope` reads."""
    names: set[str] = set()
    for table in scope.find_all(exp.Table):
        if table.alias_or_name.lower() == alias.lower() or is_window(table):
            continue
        relation = relations.get(qualify_name([p.name for p in table.parts]))
        names |= {c.name.lower() for c in relation.columns} if relation is not None else set()
    for unnest in scope.find_all(exp.Unnest):  # sql/unnest.py: its element column
        names |= {c.name.lower() for c in unnest.args["alias"].columns} if unnest.args.get("alias") else set()
    return names
