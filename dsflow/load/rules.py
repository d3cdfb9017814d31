"""How the loader asks a store kind's `rules` facet (core/protocol.py StoreRules: every rule it may give).

Each store kind's package may have a `rules` module whose `RULES` object answers the loader; every rule is
optional, and a kind without the module, or a `RULES` without the rule, has no such rule (the loader then checks
nothing, or takes the default the protocol says). The loader asks `rule(store.type, name)`, never a store type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dsflow.core import stores


def rules_of(store_type: str | None) -> Any | None:
    """The `rules` facet of a store type (core/stores.py); None for an unknown type or a kind without one."""
    return stores.facet(store_type, "rules") if store_type else None


def rule(store_type: str | None, name: str) -> Any | None:
    """One rule (a method or a value) of a store type's rules facet; None where it has none ("no rule")."""
    return getattr(rules_of(store_type), name, None)


def check_store_roles(stores_: Iterable[Any], roles: set[str]) -> list:
    """DSF-E302 for each role a store's settings name (its kind's `roles_named` rule) that nothing declares."""
    from dsflow.load.access import unknown_role

    found: list = []
    for store in stores_:
        named = rule(store.type, "roles_named")
        for role, key in sorted((named(store.properties) if named is not None else {}).items()):
            if role not in roles:
                found.append(unknown_role(role, roles, store.location, f"setting {key} of store '{store.name}'"))
    return found


def check_grants(grants: Iterable[Any], relations: Mapping[str, Any], store_types: Mapping[str, str]) -> list:
    """What the kind of the store keeping each granted relation says of the grant (its `check_grant` rule: a grant
    it will not push down, say); [] where it has no such rule."""
    found: list = []
    for grant in grants:
        kind, _, fqn = grant.on.partition(".")
        relation = relations.get(fqn) if kind == "relation" else None
        check = rule(store_types.get(relation.store or ""), "check_grant") if relation is not None else None
        if check is not None:
            found += check(grant, relation)
    return found
