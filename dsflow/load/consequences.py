"""One cause, one error: diagnostics that only follow from another one are folded under it.

An object whose declaration failed is *fallen*: its file's template did not render, its YAML entry was refused,
or its SQL statement did not parse or was refused. A later error that only says the object is unknown (unknown
store, schema or relation, a grant on an unknown object) carries the object as its `subject`; it follows from the
error that made the object fall, so it is not reported on its own: the cause's hint counts and names what it hides.
An error is folded only under a cause that is reported, so no error disappears without the one that explains it.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from dsflow.errors import Diagnostic, Location, Severity

SHOWN_NAMES = 4
"""How many hidden objects the cause's hint names; the rest are counted."""

_TEMPLATE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)
_CREATE = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:STREAM|CHANGELOG|TABLE|MATERIALIZED\s+VIEW)\s+"
                     r"(?:IF\s+NOT\s+EXISTS\s+)?((?:[\w$]+|`[^`]+`|\"[^\"]+\")(?:\.(?:[\w$]+|`[^`]+`|\"[^\"]+\"))*)",
                     re.I)


@dataclass(frozen=True)
class Declared:
    """An object a project file declares: its address (store.k, schema.db.s, relation.db.s.n) and where.
    A location without a line stands for the whole file (a file whose template failed)."""

    address: str
    location: Location


def without_template(text: str) -> str:
    """A file's text with its Jinja expressions blanked (lines kept), to read what it declares when it fails to
    render."""
    return _TEMPLATE.sub(lambda m: "x" + "\n" * m.group(0).count("\n"), text)


def yaml_declarations(data: Any, locate: Callable[[tuple], Location]) -> list[Declared]:
    """The stores, schema registries, databases and schemas a YAML file's raw content declares."""
    if not isinstance(data, dict):
        return []
    out = [Declared(f"{kind}.{name}", locate((key, i)))
           for key, kind in (("stores", "store"), ("schema_registries", "schema_registry"))
           for i, name in _names(data.get(key))]
    for i, db in _names(data.get("databases")):
        out.append(Declared(f"database.{db}", locate(("databases", i))))
        schemas = data["databases"][i].get("schemas")
        out += [Declared(f"schema.{db}.{s}", locate(("databases", i))) for _, s in _names(schemas)]
    return out


def _names(entries: Any) -> Iterable[tuple[int, str]]:
    """(index, name) of each entry of a YAML list: a `name:` mapping or a plain string."""
    if not isinstance(entries, list):
        return []
    found = []
    for i, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else entry
        if isinstance(name, str) and name:
            found.append((i, name))
    return found


def sql_declarations(text: str, path: str, qualify: Callable[[list[str]], str],
                     whole_file: bool = False) -> list[Declared]:
    """The relations a SQL file's CREATE statements declare (found in its text, parsed or not)."""
    out = []
    for found in _CREATE.finditer(text):
        parts = [p.strip('`"') for p in re.findall(r'`[^`]+`|"[^"]+"|[^.]+', found.group(1))]
        line = text.count("\n", 0, found.start()) + 1
        out.append(Declared(f"relation.{qualify(parts)}", Location(path) if whole_file else Location(path, line)))
    return out


def fold(diagnostics: list[Diagnostic], fallen: list[Declared]) -> list[Diagnostic]:
    """The diagnostics with each error that only follows from another one folded under its cause."""
    causes = _Causes(fallen)
    errors = _errors_by_file(diagnostics)
    roots: dict[int, int] = {}
    for index in range(len(diagnostics)):
        root = _root(index, diagnostics, causes, errors, roots)
        if root != index:
            roots[index] = root
    hidden: dict[int, list[str]] = {}
    for index, root in roots.items():
        hidden.setdefault(root, []).append(_fallen_address(diagnostics[index].subject, causes) or "")
    return [_with_hidden(d, hidden.get(i, [])) for i, d in enumerate(diagnostics) if i not in roots]


def _errors_by_file(diagnostics: list[Diagnostic]) -> dict[str, list[tuple[int, int, int]]]:
    """Each file's errors as (line, col, index), sorted."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for index, d in enumerate(diagnostics):
        if d.severity is Severity.ERROR and d.location is not None:
            out.setdefault(d.location.file, []).append((d.location.line, d.location.col, index))
    for found in out.values():
        found.sort()
    return out


def _root(index: int, diagnostics: list[Diagnostic], causes: _Causes,
          errors: dict[str, list[tuple[int, int, int]]], known: dict[int, int]) -> int:
    """The reported error this one follows from (itself if it follows from none), up a chain of causes."""
    chain: list[int] = []
    current = index
    while current not in known and current not in chain:
        chain.append(current)
        address = _fallen_address(diagnostics[current].subject, causes)
        cause = None if address is None else _cause(causes[address], errors, current)
        if cause is None:
            break
        current = cause
    root = known.get(current, current)
    for step in chain:  # every error of the chain follows from the same root (a cycle: from where it closed)
        if step != root:
            known[step] = root
    return root


class _Causes(dict[str, Location]):
    """Fallen addresses -> where each was declared, also found by a name that ends one ('curated.v')."""

    def __init__(self, fallen: list[Declared]) -> None:
        super().__init__((d.address, d.location) for d in reversed(fallen))  # the first declaration of a name wins
        self.by_last: dict[str, list[str]] = {}
        for address in self:
            self.by_last.setdefault(address.rsplit(".", 1)[-1], []).append(address)


def _fallen_address(subject: str | None, causes: _Causes) -> str | None:
    """The fallen object a subject names: its address, or a name that ends it ('curated.v' for a relation)."""
    if not subject:
        return None
    if subject in causes:
        return subject
    candidates = causes.by_last.get(subject.rsplit(".", 1)[-1], [])
    return next((a for a in candidates if a.endswith("." + subject)), None)


def _cause(where: Location, errors: dict[str, list[tuple[int, int, int]]], not_this: int) -> int | None:
    """The first error at or after a declaration in its file: the error that made it fall."""
    found = errors.get(where.file, [])
    start = bisect.bisect_left(found, (where.line, -1, -1)) if where.line else 0
    return next((index for _, _, index in found[start:start + 2] if index != not_this), None)


def _with_hidden(cause: Diagnostic, hidden: list[str]) -> Diagnostic:
    """The cause, its hint noting how many errors follow from it and the objects they name."""
    if not hidden:
        return cause
    names = sorted(set(hidden))
    shown = ", ".join(_named(n) for n in names[:SHOWN_NAMES])
    more = f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
    note = f"{len(hidden)} error(s) that follow from this one are not shown (unknown {shown}{more})"
    return replace(cause, hint=f"{cause.hint}\n  {note}" if cause.hint else note)


def _named(address: str) -> str:
    """'store.main' -> "store 'main'"."""
    kind, name = address.split(".", 1)
    return f"{kind.replace('_', ' ')} '{name}'"
