"""Moves: a deployed relation or query that the project now declares at another address.

A move is declared in YAML (`moved:`, like Terraform's moved blocks) or found: a relation that left the project and
a new one on the same physical object (store and topic, or table) with the same definition. A relation move carries
its own query along (CREATE STREAM ... AS SELECT names both alike). The plan is made as if the state entry had
always been at the new address (`moved_state`): the move is an update of the new address, together with whatever
its definition change asks for (in place, replace), and the queries and generators that name a moved relation are
compared with the new names, so a rename alone keeps their checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsflow.core import stores
from dsflow.core.address import Address, Kind
from dsflow.core.categories import Category, effect_text
from dsflow.core.changes import Action, Change
from dsflow.core.physical import TABLES, physical_key, physical_object
from dsflow.core.resources import Resource, fingerprint
from dsflow.core.state import State

def find_moves(declared: Mapping[str, str], wanted: Mapping[str, Resource], state: State) -> dict[str, str]:
    """New address -> deployed address of every move this plan makes. A declared move whose old address is not
    deployed (applied before, or never) is no move; nor one whose new address is deployed already."""
    moves = {new: old for new, old in declared.items()
             if new in wanted and old in state.resources and new not in state.resources and old not in wanted}
    moves |= _found(wanted, state, moves)
    return moves | _own_queries(wanted, state, moves)


def _found(wanted: Mapping[str, Resource], state: State, taken: Mapping[str, str]) -> dict[str, str]:
    """Relations renamed onto the same physical object with the same definition."""
    used = set(taken.values())
    gone: dict[tuple[str, ...], str] = {}
    for key, deployed in state.resources.items():
        if key.startswith("relation.") and key not in wanted and key not in used:
            physical = physical_key(deployed.data)
            if physical is not None:
                gone.setdefault(physical, key)
    found: dict[str, str] = {}
    for key, resource in wanted.items():
        if resource.address.kind is not Kind.RELATION or key in state.resources or key in taken or not gone:
            continue
        old = gone.pop(physical_key(resource.data) or ("",), None)
        if old is not None and state.resources[old].data_hash == resource.data_hash:
            found[key] = old
    return found


def _own_queries(wanted: Mapping[str, Resource], state: State, moves: Mapping[str, str]) -> dict[str, str]:
    """The query of a moved relation (CREATE ... AS SELECT) moves with it unless a move of its own says otherwise."""
    used = set(moves.values())
    implied = {}
    for new, old in moves.items():
        if not new.startswith("relation."):
            continue
        new_query, old_query = "query." + new.partition(".")[2], "query." + old.partition(".")[2]
        deployed = state.resources.get(old_query)
        if (new_query in wanted and new_query not in state.resources and new_query not in moves
                and deployed is not None and old_query not in wanted and old_query not in used
                and deployed.data.get("sink") == old.partition(".")[2]):
            implied[new_query] = old_query
    return implied


def moved_state(state: State, moves: Mapping[str, str]) -> tuple[State, frozenset[str]]:
    """The state as if every move had been made: entries (and a query's versions in the ledger) at their new
    addresses, and the queries and generators that name a moved relation naming it by its new name. Also the
    addresses whose names were changed (they are updated, even when nothing else of them changed)."""
    if not moves:
        return state, frozenset()
    names = {old.partition(".")[2]: new.partition(".")[2] for new, old in moves.items() if new.startswith("relation.")}
    resources = dict(state.resources)
    for new, old in moves.items():
        resources[new] = resources.pop(old).model_copy(update={"address": new})
    renamed = set()
    for key, entry in resources.items():
        data = renamed_references(entry.data, names) if key.startswith(("query.", "datagen.")) else entry.data
        if data is not entry.data:
            resources[key] = entry.model_copy(update={"data": data, "data_hash": fingerprint(data)})
            renamed.add(key)
    back = {old: new for new, old in moves.items()}
    ledger = [e.model_copy(update={"query": back[e.query]}) if e.query in back else e for e in state.ledger]
    return state.model_copy(update={"resources": resources, "ledger": ledger}), frozenset(renamed)


def renamed_references(data: dict[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """A query's or generator's data with moved relations under their new names (the same dict if none)."""
    update: dict[str, Any] = {}
    if data.get("sink") in names:
        update["sink"] = names[data["sink"]]
    if any(s[0] in names for s in data.get("sources", [])):
        update["sources"] = [[names.get(s[0], s[0]), *s[1:]] for s in data["sources"]]
    if isinstance(data.get("relation"), str) and data["relation"] in names:
        update["relation"] = names[data["relation"]]
    return {**data, **update} if update else data


def table_rename(before: dict[str, Any], after: dict[str, Any],
                 store_types: Mapping[str, str]) -> tuple[str, str] | None:
    """(old, new) table name when a materialized view kept in a store, or a table (CREATE TABLE ... AS SELECT),
    changed only its table's name (the option its store kind's rules name `view_table_key`; same database and
    schema): ALTER TABLE ... RENAME TO keeps its rows. None for any other change, and in a store without such a key
    (SQLite, the lake and warehouse tables)."""
    if before.get("kind") not in TABLES:
        return None
    key = getattr(stores.facet(store_types.get(after.get("store", ""), ""), "rules"), "view_table_key", None)
    if key is None:
        return None
    if [k for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)] != ["table_options", "topic"]:
        return None
    old, new = before.get("table_options") or {}, after.get("table_options") or {}
    if [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)] != [key]:
        return None
    return old[key], new[key]


def with_move(change: Change, moves: Mapping[str, str], renamed: frozenset[str],
              store_types: Mapping[str, str]) -> Change:
    """A moved resource's change says where it moved from (an unchanged one is an update: the state entry moves);
    one that names a moved relation is updated to the new name. A view's or a table's table renamed by a move is
    renamed in place (ALTER TABLE ... RENAME TO), not replaced."""
    old = moves.get(change.address)
    if old is None:
        return _names_moved(change) if change.address in renamed else change
    kind = Address.parse(change.address).kind
    update: dict[str, Any] = {"moved_from": old, "reason": f"moved from {old}; {change.reason}"}
    where = physical_object(change.before or {}, store_types) if kind is Kind.RELATION else ""
    rename = table_rename(change.before or {}, change.after or {}, store_types) \
        if change.action is Action.REPLACE and kind is Kind.RELATION else None
    if rename is not None:
        update |= {"action": Action.UPDATE, "category": None, "affected": [],
                   "reason": f"moved from {old}; table {rename[0]} renamed to {rename[1]} (in place)",
                   "effect": f"{where} renamed to {rename[1]} (ALTER TABLE ... RENAME TO); its rows kept"}
    elif change.action is Action.REPLACE and kind is Kind.RELATION and where != (new := physical_object(
            change.after or {}, store_types)):
        update["effect"] = (f"{where} deleted (if dsflow created it): it cannot be renamed, its records are lost; "
                            f"{new} created (used as it is if it exists)")
    elif change.action is Action.NOOP and kind is Kind.RELATION:
        update |= {"action": Action.UPDATE, "reason": f"moved from {old} (same {where})",
                   "effect": f"{where} and its records kept; only the name changes"}
    elif change.action is Action.NOOP:
        update |= {"action": Action.UPDATE, "reason": f"moved from {old}"}
        if kind is Kind.QUERY:
            update |= {"category": Category.IN_PLACE, "effect": effect_text(Category.IN_PLACE, None)}
    return change.model_copy(update=update)


def _names_moved(change: Change) -> Change:
    """A query or generator that reads or writes a moved relation: restarted under the relation's new name."""
    if change.action is not Action.NOOP:
        return change.model_copy(update={"reason": f"{change.reason} (it names a moved relation)"})
    update: dict[str, Any] = {"action": Action.UPDATE, "reason": "a relation it names moved (in place)"}
    if Address.parse(change.address).kind is Kind.QUERY:
        update |= {"category": Category.IN_PLACE, "effect": effect_text(Category.IN_PLACE, None)}
    return change.model_copy(update=update)
