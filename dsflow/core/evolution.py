"""Schema evolution of a relation's columns under a compatibility rule (Confluent's semantics), in the pure core.

    BACKWARD    consumers on the new schema read data written with the previous one
    FORWARD     consumers on the previous schema read data written with the new one
    FULL        both
    *_TRANSITIVE  the same against every earlier schema, not only the previous one
    NONE        any change

Every dsflow column is nullable (an Avro field with a null default), so adding or dropping a column is compatible
under every rule; a retyped column is compatible only where the reading side's type widens the writing side's
(INT -> BIGINT, FLOAT -> DOUBLE). Columns are matched by name: that holds for json and avro values; a protobuf
value numbers its fields in column order, so it evolves only by columns appended at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

RULES = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE")
DEFAULT_RULE = "BACKWARD"
NAMED_FORMATS = ("json", "avro")
"""Value formats whose fields are matched by name; any other evolves only by columns appended at the end."""

_ALIASES = {"INTEGER": "INT", "LONG": "BIGINT", "SHORT": "SMALLINT", "BYTE": "TINYINT", "REAL": "FLOAT",
            "STRING": "VARCHAR", "TEXT": "VARCHAR", "BOOL": "BOOLEAN"}
_WIDER = {"TINYINT": ("SMALLINT", "INT", "BIGINT"), "SMALLINT": ("INT", "BIGINT"), "INT": ("BIGINT",),
          "FLOAT": ("DOUBLE",)}

Columns = Sequence[Sequence[str]]


@dataclass(frozen=True)
class Evolution:
    """What changed between two column lists: columns added, dropped, retyped (name, old, new type), and
    whether the columns both keep changed their order."""

    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    retyped: tuple[tuple[str, str, str], ...] = ()
    reordered: bool = False

    @property
    def appended_only(self) -> bool:
        return bool(self.added) and not (self.dropped or self.retyped or self.reordered)

    def describe(self) -> str:
        """In words, e.g. 'column(s) referrer added, name dropped, id retyped INT -> BIGINT'."""
        parts = [f"{', '.join(self.added)} added" if self.added else "",
                 f"{', '.join(self.dropped)} dropped" if self.dropped else "",
                 ", ".join(f"{n} retyped {a} -> {b}" for n, a, b in self.retyped),
                 "order changed" if self.reordered else ""]
        return "column(s) " + ", ".join(p for p in parts if p)


def evolution(old: Columns, new: Columns) -> Evolution:
    """The difference between two column lists [(name, SQL type), ...]."""
    before, after = {n: t for n, t in old}, {n: t for n, t in new}
    kept_old = [n for n, _ in old if n in after]
    kept_new = [n for n, _ in new if n in before]
    return Evolution(added=tuple(n for n, _ in new if n not in before),
                     dropped=tuple(n for n, _ in old if n not in after),
                     retyped=tuple((n, before[n], t) for n, t in new if n in before and not _same_type(before[n], t)),
                     reordered=kept_old != kept_new)


def incompatibility(history: Sequence[Columns], new: Columns, rule: str, value_format: str = "json") -> str | None:
    """None when `new` may follow the schemas of `history` (oldest first, the deployed one last) under `rule`;
    else why not, in words that name the rule."""
    rule = rule.upper()
    if not history or rule == "NONE":
        return None
    checked = history if rule.endswith("_TRANSITIVE") else history[-1:]
    for old in reversed(checked):
        why = _incompatible(old, new, rule.removesuffix("_TRANSITIVE"), value_format)
        if why is not None:
            return f"{why}: incompatible under {rule}"
    return None


def _incompatible(old: Columns, new: Columns, rule: str, value_format: str) -> str | None:
    change = evolution(old, new)
    if value_format not in NAMED_FORMATS and not (change.appended_only or change == Evolution()):
        return f"{change.describe()} ({value_format} fields are numbered in column order)"
    if change.reordered:
        return "column order changed"
    for name, was, now in change.retyped:
        readable_new = widens(was, now)  # a reader on the new schema reads old data
        readable_old = widens(now, was)  # a reader on the old schema reads new data
        if (rule == "BACKWARD" and not readable_new) or (rule == "FORWARD" and not readable_old) \
                or (rule == "FULL" and not (readable_new and readable_old)):
            return f"column {name} retyped {was} -> {now}"
    return None


def widens(writer: str, reader: str) -> bool:
    """A value written as `writer` reads as `reader`: the same type, or a widening (INT -> BIGINT, FLOAT -> DOUBLE)."""
    a, b = _canonical(writer), _canonical(reader)
    return a == b or b in _WIDER.get(a, ())


def _same_type(a: str, b: str) -> bool:
    return _canonical(a) == _canonical(b)


def _canonical(sql_type: str) -> str:
    upper = " ".join(sql_type.strip().upper().split())
    return _ALIASES.get(upper, upper)
