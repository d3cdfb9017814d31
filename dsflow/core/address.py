"""Typed addresses of the resources dsflow manages, e.g. `relation.analytics.public.pageviews`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(str, Enum):
    """What sort of resource an address names; the order is the creation order of equals."""

    STORE = "store"
    DATABASE = "database"
    SCHEMA = "schema"
    RELATION = "relation"
    FUNCTION = "function"
    VIEW = "view"
    QUERY = "query"
    DATAGEN = "datagen"
    ROLE = "role"
    BINDING = "binding"
    GRANT = "grant"


@dataclass(frozen=True, order=True)
class Address:
    """A resource's identity: its kind and its dotted name."""

    kind: Kind
    name: str

    def __str__(self) -> str:
        return self._str  # type: ignore[attr-defined]  # set by __post_init__, on purpose not a field

    def __post_init__(self) -> None:
        # the hash and the text, computed once: a plan hashes each address ~8 times (graph dicts, sets, lookups)
        # and writes it as text ~14 times. The hash is consistent with the generated __eq__; by the kind's value
        # because Enum.__hash__ is Python code (and Enum.value a Python-level descriptor). Not fields, so
        # equality, ordering and repr are unchanged.
        object.__setattr__(self, "_hash", hash((self.kind._value_, self.name)))
        object.__setattr__(self, "_str", f"{self.kind._value_}.{self.name}")

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]  # set by __post_init__, on purpose not a field

    def __reduce__(self) -> tuple:
        # pickled by its fields: another process hashes strings differently, so its _hash is computed again
        return (Address, (self.kind, self.name))

    @classmethod
    def parse(cls, text: str) -> Address:
        kind, _, name = text.partition(".")
        return cls(Kind(kind), name)
