"""ROW_NUMBER top-N and deduplication per key (Nexmark q18, q19): one shape, recognised whole.

    SELECT cols FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY t [DESC], ...) AS rn
                      FROM rel [WHERE ...]) [AS q]
    WHERE rn <= N | rn < N | rn = 1

The subquery reads one stream or changelog, or a regular join of two streams (Nexmark q9: `FROM auction A, bid B
WHERE A.id = B.auction AND ...`, run as sql/keyed_join.py says; `A.*` selects A's columns), without GROUP BY; the
outer WHERE is the rank filter alone. The
result is a changelog keyed by the PARTITION BY columns (N = 1: the top row per key; `ORDER BY t DESC` keeps the
latest) or by them and the rank column (N > 1: one row per rank). Over a changelog, a row updated or deleted
changes the ranking: a deleted top row gives way to the next one, and a rank left without a row is deleted.
`extract_top_n` flattens the two SELECTs into one over the relation, the rank a placeholder column while
sql/select.py resolves and types it; `restore_top_n` puts the ROW_NUMBER window back as that column of the resolved
SELECT (select_sql). Spark runs it (adapters/spark/topn.py).

    DSF-E185  a variant of the shape: no PARTITION BY or ORDER BY, a window frame, another filter than on the rank,
              the rank in an expression, a GROUP BY, ... (at the construct)
    DSF-E187  a PARTITION BY column, or (N > 1) the rank, is not selected: it keys the result (load/queries.py
              gives it too for a sink that is not a changelog keyed by the partition columns [and the rank])

Whether a SELECT is this shape is decided by its outer FROM: a subquery whose SELECT projects ROW_NUMBER() OVER
(...) and reads relations (one, or a join of them). Any other ROW_NUMBER (at the top level, ...) stays DSF-E045
(sql/select.py), with a hint that gives this shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from dsflow.core.model import HIDDEN_RANK, Relation, TopN
from dsflow.errors import Diagnostic

Report = Callable[[Diagnostic], None]
PLACEHOLDER = "CAST(NULL AS BIGINT)"
SHAPE = ("SELECT cols FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY t DESC) AS rn FROM rel) "
         "WHERE rn <= N (or rn = 1, rn < N)")
EXACT_ORDERINGS = ("number", "string", "timestamp", "date", "boolean")
"""The kinds (sql/typekinds.py) of an ORDER BY column the ranking compares exactly (adapters/spark/topn_state.py)."""


@dataclass(frozen=True)
class Extracted:
    """A recognised top-N: its model, and the ROW_NUMBER window to restore (over `alias`, the relation's alias)."""

    top_n: TopN
    window: exp.Window
    alias: str


def _row_number_of(select: exp.Expr) -> tuple[exp.Select, exp.Alias] | None:
    """(the subquery's SELECT, its ROW_NUMBER projection) when `select` reads FROM a subquery that projects
    ROW_NUMBER() OVER (...) and reads one relation; None otherwise (not this shape)."""
    if not isinstance(select, exp.Select) or select.args.get("from_") is None:
        return None
    sub = select.args["from_"].this
    if not isinstance(sub, exp.Subquery) or not isinstance(sub.this, exp.Select):
        return None
    inner = sub.this
    source = inner.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table) \
            or not all(isinstance(j.this, exp.Table) for j in inner.args.get("joins") or []):
        return None  # a join of relations: run as sql/keyed_join.py says
    for projection in inner.selects:
        if isinstance(projection, exp.Alias) and isinstance(projection.this, exp.Window) \
                and isinstance(projection.this.this, exp.RowNumber):
            return inner, projection
    return None


def extract_top_n(select: exp.Expr, relations: dict[str, Relation], qualify_name, where,
                  report: Report) -> Extracted | None | Literal[False]:
    """Flatten a top-N SELECT in place into one over its relation, the rank a placeholder; the top-N found, None for
    another SELECT, False when its variant was refused (reported)."""
    found = _row_number_of(select)
    if found is None:
        return None
    assert isinstance(select, exp.Select)  # _row_number_of
    inner, ranked = found
    window, rank = ranked.this, ranked.alias
    problem = _inner_problem(inner, window) or _outer_problem(select, rank)
    if problem is not None:
        node, message = problem
        report(Diagnostic("DSF-E185", message, where(node), hint=f"the form supported: {SHAPE}"))
        return False
    table = inner.args["from_"].this
    read = {t.alias_or_name.lower(): relations.get(qualify_name([p.name for p in t.parts]))
            for t in [table, *(j.this for j in inner.args.get("joins") or [])]}
    relation = read[table.alias_or_name.lower()]
    if _ordering_problem(window, read, table.alias_or_name, where, report):
        return False
    limit = _limit(select.args["where"].this, rank)
    assert limit is not None  # _outer_problem
    projections = _flat_projections(select, inner, ranked)
    if projections is False:
        report(Diagnostic("DSF-E185", f"the rank '{rank}' inside an expression is not supported", where(select),
                          hint=f"select it as a column: SELECT ..., {rank} FROM (...)"))
        return False
    outputs = {_output_name(p).lower(): p for p in projections if not _is_star(p)}
    star = any(_is_star(p) for p in projections)  # the relation's every column, as it is
    partition = tuple(c.name for c in window.args["partition_by"])
    missing = [p for p in partition if not (_selects_column(outputs.get(p.lower()), p)
                                             or (star and p.lower() not in outputs))]
    selected = rank.lower() in outputs
    if missing or (limit > 1 and not selected):
        what = f"the PARTITION BY column '{missing[0]}'" if missing else f"the rank '{rank}'"
        keys = ", ".join((*partition, *((rank,) if limit > 1 else ())))
        report(Diagnostic("DSF-E187", f"{what} must be selected: the result is a changelog keyed by ({keys})",
                          where(select), hint=f"add {missing[0] if missing else rank} to the SELECT list"))
        return False
    flat = exp.Select(expressions=projections, from_=inner.args["from_"].copy())
    if inner.args.get("joins"):
        flat.set("joins", [j.copy() for j in inner.args["joins"]])
    if inner.args.get("where") is not None:
        flat.set("where", inner.args["where"].copy())
    _replace_tree(select, flat)
    names = {n.lower(): _output_name(outputs[n.lower()]) if n.lower() in outputs else _column_name(relation, n)
             for n in partition}
    top_n = TopN(limit=limit, partition=tuple(names[p.lower()] for p in partition),
                 rank_column=_output_name(outputs[rank.lower()]) if selected else None)
    return Extracted(top_n, window.copy(), table.alias_or_name)


def _replace_tree(select: exp.Select, flat: exp.Select) -> None:
    """`select` becomes `flat`, in place (the caller holds `select`)."""
    for key in list(select.args):
        select.set(key, None)
    for key, value in flat.args.items():
        select.set(key, value)


def _inner_problem(inner: exp.Select, window: exp.Window) -> tuple[exp.Expr, str] | None:
    if not window.args.get("partition_by"):
        return window, "ROW_NUMBER() needs PARTITION BY: the ranking is per key (one global ranking is not supported)"
    loose = next((p for p in window.args["partition_by"] if not isinstance(p, exp.Column)), None)
    if loose is not None:
        return loose, f"PARTITION BY {loose.sql()}: partition by columns of the relation"
    order = window.args.get("order")
    if order is None or not order.expressions:
        return window, "ROW_NUMBER() needs ORDER BY: which row ranks first"
    if window.args.get("spec") is not None:
        return window, "ROW_NUMBER() takes no window frame (ROWS/RANGE BETWEEN ...)"
    for key in ("group", "having", "distinct", "order", "limit", "qualify"):
        if inner.args.get(key) is not None:
            return inner.args[key], f"a subquery with ROW_NUMBER() takes no {key.upper()}: it ranks the relation's rows"
    others = [w for w in inner.find_all(exp.Window) if w is not window] + list(inner.find_all(exp.AggFunc))
    if others:
        return others[0], f"{others[0].sql()} beside ROW_NUMBER(): the subquery projects the relation's columns"
    return None


def _outer_problem(select: exp.Select, rank: str) -> tuple[exp.Expr, str] | None:
    for key in ("joins", "group", "having", "distinct", "order", "limit", "qualify"):
        if select.args.get(key):
            node = select.args[key]
            return (node[0] if isinstance(node, list) else node), \
                f"a query over ROW_NUMBER() takes no {key.upper()}: it selects the ranked rows"
    other = next((n for n in select.find_all(exp.Window, exp.AggFunc) if n.find_ancestor(exp.Subquery) is None), None)
    if other is not None:
        return other, f"{other.sql()} over ranked rows is not supported"
    condition = select.args.get("where")
    if condition is None:
        return select, f"a ROW_NUMBER() subquery needs WHERE {rank} <= N in the query over it: the rows it keeps"
    if _limit(condition.this, rank) is None:
        return condition.this, (f"WHERE {condition.this.sql()}: the rows kept are WHERE {rank} <= N, {rank} < N or "
                                f"{rank} = 1, and nothing else")
    return None


def _limit(condition: exp.Expr, rank: str) -> int | None:
    """N of `rank <= N`, `rank < N + 1`, `rank = 1` (or reversed: `N >= rank`); None for another condition."""
    flipped = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.EQ: exp.EQ}
    node = condition.unnest() if isinstance(condition, exp.Paren) else condition
    if not isinstance(node, exp.LTE | exp.LT | exp.EQ | exp.GTE | exp.GT):
        return None
    left, right, kind = node.this, node.expression, type(node)
    if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
        left, right, kind = right, left, flipped.get(kind)  # type: ignore[assignment]
    if kind not in (exp.LTE, exp.LT, exp.EQ) or not isinstance(left, exp.Column) or left.name.lower() != rank.lower() \
            or not (isinstance(right, exp.Literal) and right.is_int):
        return None
    value = int(right.name) - (1 if kind is exp.LT else 0)
    return value if value >= 1 and (kind is not exp.EQ or value == 1) else None


def _flat_projections(select: exp.Select, inner: exp.Select, ranked: exp.Alias) -> list[exp.Expr] | Literal[False]:
    """The outer projections in terms of the relation: a column of the subquery becomes its expression there (a `*` of
    the subquery its projections), the rank the placeholder; False when the rank is inside an expression."""
    rank = ranked.alias.lower()
    named = {p.alias_or_name.lower(): p for p in inner.selects if not _is_star(p) and p is not ranked}
    stars = [p for p in inner.selects if _is_star(p)]
    star = bool(stars)
    of = stars[0].table if len(stars) == 1 and isinstance(stars[0], exp.Column) else ""  # `A.*`: A's columns

    def placeholder(name: str) -> exp.Expr:
        return exp.alias_(exp.maybe_parse(PLACEHOLDER), name, quoted=True)

    def inner_column(column: exp.Column) -> exp.Expr:
        found = named.get(column.name.lower())
        if found is not None:
            return found.unalias().copy()
        if not star:
            return column.copy()
        return exp.column(column.this.copy(), table=of) if of else exp.Column(this=column.this.copy())

    out: list[exp.Expr] = []
    for projection in select.selects:
        if _is_star(projection):
            out += [placeholder(ranked.alias) if p is ranked else p.copy() for p in inner.selects]
        elif isinstance(projection.unalias(), exp.Column) and projection.unalias().name.lower() == rank:
            out.append(placeholder(projection.alias_or_name))
        elif any(c.name.lower() == rank for c in projection.find_all(exp.Column)):
            return False
        else:
            name = projection.alias_or_name
            body = projection.unalias().copy()
            body = inner_column(body) if isinstance(body, exp.Column) else body.transform(
                lambda n: inner_column(n) if isinstance(n, exp.Column) else n)
            column = isinstance(body, exp.Column) and body.name == name
            out.append(body if column else exp.alias_(body, name, quoted=isinstance(projection, exp.Alias)
                                                      and projection.args["alias"].quoted))
    return out


def _is_star(node: exp.Expr) -> bool:
    return isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star))


def _column_name(relation: Relation | None, name: str) -> str:
    """The relation's column `name` as the relation declares it (a `*` selects it under that name)."""
    column = relation.column(name) if relation is not None else None
    return column.name if column is not None else name


def _output_name(projection: exp.Expr) -> str:
    return projection.alias_or_name


def _selects_column(projection: exp.Expr | None, name: str) -> bool:
    """Whether `projection` is the relation's column `name` as it is (a `*` counts: it selects every column)."""
    if projection is None:
        return False
    body = projection.unalias()
    return isinstance(body, exp.Column) and body.name.lower() == name.lower()


def _ordering_problem(window: exp.Window, read: dict[str, Relation | None], first: str, where,
                      report: Report) -> bool:
    """DSF-E185 for an ORDER BY column of a type the ranking does not compare exactly; True if reported. `read`:
    the relations read, by alias in lower case; an unqualified column is `first`'s."""
    from dsflow.sql.typekinds import kind_of

    for column in window.args["order"].find_all(exp.Column):
        relation = read.get((column.table or first).lower())
        declared = relation.column(column.name) if relation is not None else None
        if declared is None:
            continue  # an unknown column: sql/select.py names it (DSF-E041)
        type_ = exp.DataType.build(declared.type, dialect="spark")
        if kind_of(type_) not in EXACT_ORDERINGS:
            report(Diagnostic("DSF-E185", f"ORDER BY {column.name}: a {declared.type} is not an ordering the ranking "
                              "compares", where(column), hint="order by numbers, strings, TIMESTAMPs, DATEs or "
                                                              "BOOLEANs"))
            return True
    return False


def restore_top_n(qualified: exp.Select, extracted: Extracted | None) -> exp.Select:
    """The resolved SELECT with the ROW_NUMBER window as its rank column (in place of the placeholder, or last, named
    HIDDEN_RANK, when the rank is not selected); its columns qualified by the relation's alias."""
    if extracted is None:
        return qualified
    window = extracted.window.copy()
    for column in window.find_all(exp.Column):
        if not column.table:
            column.set("table", exp.to_identifier(extracted.alias))
    rank = extracted.top_n.rank_column
    if rank is None:
        qualified.select(exp.alias_(window, HIDDEN_RANK), copy=False)
        return qualified
    for projection in qualified.selects:
        if projection.alias_or_name == rank and isinstance(projection, exp.Alias):
            projection.set("this", window)
            break
    return qualified


def top_n_sink(kind: str, fqn: str, top_n: TopN, primary_key: tuple[str, ...], location) -> Diagnostic | None:
    """DSF-E187 when the sink of a top-N is not a changelog keyed by its key."""
    if kind == "changelog" and {k.lower() for k in primary_key} == {k.lower() for k in top_n.key}:
        return None
    keys = ", ".join(top_n.key)
    what = f"a changelog keyed by ({', '.join(primary_key)})" if kind == "changelog" else \
        f"a {kind.replace('_', ' ')}"
    return Diagnostic("DSF-E187", f"'{fqn}' is {what}, but a ROW_NUMBER top-{top_n.limit} makes a changelog keyed by "
                      f"({keys}): the row of a key is replaced as rows arrive", location,
                      hint=f"declare it CREATE CHANGELOG {fqn.rsplit('.', 1)[-1]} (..., PRIMARY KEY ({keys})) "
                           "WITH (...)")
