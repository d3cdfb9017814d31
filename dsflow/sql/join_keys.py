"""Join keys matched by their text at run time must be declared with one type.

A join of changelogs (adapters/spark/changelog_join.py, also a regular join of streams run as one: sql/keyed_join.py)
and a changelog joined later in a chain (adapters/spark/join_chain.py) group each side's records by the JSON text of
its key columns, so 7 (BIGINT) and 7.0 (DOUBLE), or 12.5 as DECIMAL(10, 2) and DECIMAL(12, 3), never meet where
SQL's `=` would match them. Validate refuses such a pair (DSF-E211) instead of letting the join miss rows silently.
The first temporal join of a stream compares each pair in Spark's common type (adapters/spark/temporal.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from dsflow.core.model import Relation
from dsflow.errors import Diagnostic, Location

Report = Callable[[Diagnostic], None]
SYNONYMS = {"STRING": "VARCHAR", "TEXT": "VARCHAR", "INTEGER": "INT", "LONG": "BIGINT", "SHORT": "SMALLINT",
            "BYTE": "TINYINT", "REAL": "FLOAT", "BOOL": "BOOLEAN"}


def _normal(sql_type: str) -> str:
    text = "".join(sql_type.upper().split())
    name, _, rest = text.partition("(")
    if name.startswith(("VARCHAR", "CHAR")):  # a length does not change a key's text
        return "VARCHAR"
    return SYNONYMS.get(name, name) + (f"({rest}" if rest else "")


def check(pairs: Iterable[tuple[str, str, str, str]], relations: Mapping[str, Relation], at: Location | None,
          report: Report) -> bool:
    """(left alias, left column, right alias, right column) pairs; False (reported) at the first whose declared
    types differ. A column whose type is not known (not declared) is not checked."""
    for left_alias, left_column, right_alias, right_column in pairs:
        left, right = relations.get(left_alias), relations.get(right_alias)
        lc = left.column(left_column) if left is not None else None
        rc = right.column(right_column) if right is not None else None
        if lc is None or rc is None or _normal(lc.type) == _normal(rc.type):
            continue
        report(Diagnostic(
            "DSF-E211", f"the join key {left_alias}.{lc.name} ({lc.type}) and {right_alias}.{rc.name} ({rc.type}) "
            "have different types: this join matches its keys by their text, where equal values of two types "
            "(7 and 7.0) differ", at,
            hint=f"declare both columns with one type, or write one side through a query that casts it "
                 f"(CAST({right_alias}.{rc.name} AS {lc.type}))"))
        return False
    return True
