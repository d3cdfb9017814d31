"""How the loader asks a store kind's `rules` facet (core/protocol.py StoreRules: every rule it may give).

Each store kind's package may have a `rules` module whose `RULES` object answers the loader; every rule is
optional, and a kind without the module, or a `RULES` without the rule, has no such rule (the loader then checks
nothing, or takes the default the protocol says). The loader asks `rule(store.type, name)`, never a store type.
"""

from __future__ import annotations

from typing import Any

from dsflow.core import stores


def rules_of(store_type: str | None) -> Any | None:
    """The `rules` facet of a store type (core/stores.py); None for an unknown type or a kind without one."""
    return stores.facet(store_type, "rules") if store_type else None


def rule(store_type: str | None, name: str) -> Any | None:
    """One rule (a method or a value) of a store type's rules facet; None where it has none ("no rule")."""
    return getattr(rules_of(store_type), name, None)
