"""Enforced contracts (dbt's model contracts), in the pure core: what counts as the same type, and which changes
to a deployed contracted relation break its readers.

A relation with `'contract' = 'enforced'` promises its readers its columns, their types and its key. Compared with
what is deployed, these changes break that promise:

    a column dropped or renamed                       (DSF-E896)
    a column retyped to a type that does not widen    (DSF-E897)  INT -> BIGINT widens; BIGINT -> INT narrows
    its key or its kind changed                       (DSF-E898)

Adding a column, widening one, or removing the contract itself (on its own, in a plan of its own) is not breaking.
A breaking change comes as a new version beside the old relation instead (`<model>_v<N>` with `'version' = 'N'`,
dbt's model versions): both are deployed until the old one leaves the project.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dsflow.core.evolution import widens

ENFORCED = "enforced"
"""The value of 'contract' that enforces it (the relation's metadata records it)."""

_VERSIONED = re.compile(r"^(?P<model>.+)_v(?P<version>[1-9][0-9]*)$")


@dataclass(frozen=True)
class Break:
    """One breaking change to a deployed contracted relation."""

    address: str
    code: str
    """DSF-E896 (column dropped or renamed), DSF-E897 (column narrowed or retyped), DSF-E898 (key or kind)."""
    column: str | None
    message: str


def same_type(a: str, b: str) -> bool:
    """Two SQL types are the same contract type: equal up to case, spacing and aliases (STRING is VARCHAR, INTEGER
    is INT), nested types too."""
    a, b = _spaced(a), _spaced(b)
    return a == b or (widens(a, b) and widens(b, a))


def _spaced(sql_type: str) -> str:
    return re.sub(r"\s*,\s*", ", ", re.sub(r"\s*([(<>)])\s*", r"\1", " ".join(sql_type.split()))).upper()


def model_of(name: str) -> tuple[str, int | None]:
    """The model a relation name is a version of, and the version its name carries: `orders_v2` -> (orders, 2);
    `orders` -> (orders, None)."""
    found = _VERSIONED.match(name)
    return (found["model"], int(found["version"])) if found else (name, None)


def enforced(metadata: Mapping[str, Any] | None) -> bool:
    return (metadata or {}).get("contract") == ENFORCED


def breaks(address: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Break]:
    """What breaks a contracted relation's readers when its data goes from `before` (deployed) to `after`."""
    found: list[Break] = []
    if before.get("kind") != after.get("kind"):
        found.append(Break(address, "DSF-E898", None, f"its kind changed {before.get('kind')} -> {after.get('kind')}"))
    old_key, new_key = [k.lower() for k in before.get("primary_key", [])], [k.lower() for k in after.get("primary_key",
                                                                                                         [])]
    if old_key != new_key:
        found.append(Break(address, "DSF-E898", None, f"its key changed ({', '.join(before.get('primary_key', []))}) "
                                                      f"-> ({', '.join(after.get('primary_key', []))})"))
    return found + column_breaks(address, before.get("columns", []), after.get("columns", []))


def column_breaks(address: str, old: Sequence[Sequence[str]], new: Sequence[Sequence[str]]) -> list[Break]:
    """Columns dropped (or renamed: the old name is gone) and retyped to a type that does not widen the old one."""
    now = {name.lower(): sql_type for name, sql_type in new}
    found = []
    for name, was in old:
        if name.lower() not in now:
            found.append(Break(address, "DSF-E896", name, f"column '{name}' dropped or renamed"))
        elif not widens(was, now[name.lower()]):
            narrower = widens(now[name.lower()], was)
            found.append(Break(address, "DSF-E897", name, f"column '{name}' {'narrowed' if narrower else 'retyped'} "
                                                          f"{was} -> {now[name.lower()]}"))
    return found


def contract_breaks(desired: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]],
                    deployed: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[Break]:
    """Every breaking change the project makes to a deployed relation whose deployed contract is enforced.
    Both maps: relation address -> (data, metadata). A relation that leaves the project is not one: deleting is
    explicit, and the plan lists its readers."""
    found: list[Break] = []
    for address, (data, metadata) in sorted(deployed.items()):
        if not address.startswith("relation.") or not enforced(metadata) or address not in desired:
            continue
        found += breaks(address, data, desired[address][0])
    return found


def model_key(address: str) -> str:
    """A relation address's model: `relation.db.schema.orders_v2` -> `db.schema.orders`."""
    prefix, _, name = address.removeprefix("relation.").rpartition(".")
    return f"{prefix}.{model_of(name)[0]}"


def version_reason(address: str, creating: bool, others: Mapping[str, Mapping[str, Any]]) -> str | None:
    """What a relation created or deleted is to the other versions of its model: `others` maps the relation
    addresses that stay beside it (deployed ones for a create, wanted ones for a delete) to their metadata. None
    when it is no versioned relation, or no other version stays."""
    key = model_key(address)
    beside = sorted(a.rsplit(".", 1)[-1] for a, meta in others.items()
                    if a != address and a.startswith("relation.") and model_key(a) == key
                    and (meta.get("version") is not None or model_of(a.rsplit(".", 1)[-1])[1] is not None
                         or a == f"relation.{key}"))
    if not beside:
        return None
    if creating:
        return f"a new version of {key.rsplit('.', 1)[-1]}, beside {', '.join(beside)} (both run until the old " \
               "one leaves the project)"
    return f"an old version of {key.rsplit('.', 1)[-1]}; {', '.join(beside)} stays"
