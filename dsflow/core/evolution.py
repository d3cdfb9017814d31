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

The fields of a STRUCT column evolve as columns do (nullable too: added or dropped by name in json and avro,
appended at the end in protobuf, each kept field widening), and an ARRAY's element or a MAP's value as a column's
type: `STRUCT<a INT>` -> `STRUCT<a BIGINT, b VARCHAR>` is compatible under every rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dsflow.core.nested import Shape, parse_type

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

    @property
    def retyped_only(self) -> bool:
        return bool(self.retyped) and not (self.added or self.dropped or self.reordered)

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
    by_name = value_format in NAMED_FORMATS
    if not by_name and not (change.appended_only or change.retyped_only or change == Evolution()):
        return f"{change.describe()} ({value_format} fields are numbered in column order)"
    if change.reordered:
        return "column order changed"
    for name, was, now in change.retyped:
        readable_new = widens(was, now, by_name)  # a reader on the new schema reads old data
        readable_old = widens(now, was, by_name)  # a reader on the old schema reads new data
        if (rule == "BACKWARD" and not readable_new) or (rule == "FORWARD" and not readable_old) \
                or (rule == "FULL" and not (readable_new and readable_old)):
            return f"column {name} retyped {was} -> {now}"
    return None


def widens(writer: str, reader: str, by_name: bool = True) -> bool:
    """A value written as `writer` reads as `reader`: the same type, a widening (INT -> BIGINT, FLOAT -> DOUBLE),
    or a STRUCT, ARRAY or MAP whose parts do (struct fields matched by name, or `by_name` False: by position, the
    reader's fields a prefix or an extension of the writer's)."""
    a, b = _canonical(writer), _canonical(reader)
    if a == b or b in _WIDER.get(a, ()):
        return True
    if "<" not in a or "<" not in b:
        return False
    try:
        return _shape_widens(parse_type(writer), parse_type(reader), by_name)
    except ValueError:
        return False


def _shape_widens(writer: Shape, reader: Shape, by_name: bool) -> bool:
    if writer.kind != reader.kind:
        return False
    if writer.kind == "scalar":
        return widens(writer.type, reader.type)
    if writer.kind == "array":
        return _shape_widens(writer.element_shape, reader.element_shape, by_name)
    if writer.kind == "map":
        return _canonical(writer.key_shape.type) == _canonical(reader.key_shape.type) and \
            _shape_widens(writer.element_shape, reader.element_shape, by_name)
    if by_name:
        written = {name.lower(): shape for name, shape in writer.fields}
        return all(_shape_widens(written[name.lower()], shape, by_name)
                   for name, shape in reader.fields if name.lower() in written)
    kept = min(len(writer.fields), len(reader.fields))
    return all(w[0].lower() == r[0].lower() and _shape_widens(w[1], r[1], by_name)
               for w, r in zip(writer.fields[:kept], reader.fields[:kept], strict=True))


def _same_type(a: str, b: str) -> bool:
    return _canonical(a) == _canonical(b)


def _canonical(sql_type: str) -> str:
    upper = " ".join(sql_type.strip().upper().split())
    return _ALIASES.get(upper, upper)
