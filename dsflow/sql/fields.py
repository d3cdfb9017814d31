"""Struct field access `col->field` (nested `a->b->c`) in a SELECT: checking the fields, and grouping by them.

The dialect (sql/dialect.py) parses `col->field` as exp.Dot(col, field); sqlglot's type annotation gives
each access the field's declared type, and its output name is the field's name (`after->id` is `id`).
An access to a field the STRUCT does not declare, or `->` on a column that is not a STRUCT, is DSF-E048
at its file:line:col, with the struct's fields as the hint.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from sqlglot import exp

from dsflow.sql.dialect import SPARK
from dsflow.errors import Diagnostic

Report = Callable[[Diagnostic], None]


def is_access(node: exp.Expr | None) -> bool:
    """True for `x->field`: a Dot whose field is a name and whose base is a column or another access."""
    return isinstance(node, exp.Dot) and isinstance(node.expression, exp.Identifier) and \
        isinstance(node.this, (exp.Column, exp.Dot))


def base_column(node: exp.Expr) -> exp.Column | None:
    """The column a reference starts from: `t.after->a->b` -> `t.after`; a column itself; None otherwise."""
    while is_access(node):
        node = node.this
    return node if isinstance(node, exp.Column) else None


def references(node: exp.Expr) -> list[exp.Expr]:
    """The outermost column references in `node`: whole `a->b->c` chains, and columns not inside one."""
    found: list[exp.Expr] = []
    for child in node.walk(prune=lambda n: is_access(n)):
        if is_access(child) or (isinstance(child, exp.Column) and not is_access(child.parent)):
            found.append(child)
    return found


def _struct_fields(type_: exp.DataType | None) -> dict[str, str] | None:
    """{field name in lower case: name} of a STRUCT type; None for any other (or an unknown) type."""
    if type_ is None or not type_.is_type(exp.DataType.Type.STRUCT):
        return None
    return {f.name.lower(): f.name for f in type_.expressions}


def check_fields(qualified: exp.Select, where, report: Report) -> bool:
    """DSF-E048 for each `->` to an unknown field or on a non-STRUCT value (types from annotate_types)."""
    ok = True
    for dot in qualified.find_all(exp.Dot):
        if not is_access(dot) or (is_access(dot.this) and _failed(dot.this)):
            continue
        base_type = dot.this.type
        fields = _struct_fields(base_type)
        field = dot.expression.name
        if fields is None:
            if base_type is None or base_type.is_type(exp.DataType.Type.UNKNOWN):
                continue  # the base was not resolved: reported where it is (an unknown column)
            report(Diagnostic("DSF-E048", f"'{dot.this.sql(dialect='spark')}' is {base_type.sql()}, not a STRUCT: "
                              f"no field '{field}'", where(dot),
                              hint="-> reads a field of a STRUCT column, e.g. after->id"))
        elif field.lower() not in fields:
            close = difflib.get_close_matches(field.lower(), list(fields), n=1, cutoff=0.6)
            report(Diagnostic("DSF-E048", f"'{dot.this.sql(dialect='spark')}' has no field '{field}'", where(dot),
                              hint=(f"did you mean '{fields[close[0]]}'? " if close else "") +
                                   f"its fields are {', '.join(fields.values())}"))
        else:
            continue
        dot.meta["dsflow_failed"] = True
        ok = False
    return ok


def _failed(dot: exp.Dot) -> bool:
    return bool(dot.meta.get("dsflow_failed")) or (is_access(dot.this) and _failed(dot.this))


def group_key_sql(node: exp.Expr) -> str:
    """How a GROUP BY item and a projection are matched: their normalized SQL."""
    return node.sql(dialect=SPARK)


def type_map_subscripts(select: exp.Expr, annotate: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """`m['key']` typed as the MAP's value type (sqlglot leaves it UNKNOWN, which would make the column VARCHAR
    in a sink's schema), and the expressions around it typed again by `annotate`; innermost first."""
    for _ in range(4):
        changed = False
        for bracket in sorted(select.find_all(exp.Bracket), key=lambda b: -b.depth):
            base = bracket.this.type
            if (bracket.type is not None and not bracket.is_type(exp.DataType.Type.UNKNOWN)) or base is None \
                    or not base.is_type(exp.DataType.Type.MAP) or len(base.expressions) != 2:
                continue
            bracket.type = base.expressions[1].copy()
            node = bracket.parent
            while node is not None:
                node.type = None
                node = node.parent
            changed = True
        if not changed:
            return select
        select = annotate(select)
    return select
