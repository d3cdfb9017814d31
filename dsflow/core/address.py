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
    QUERY = "query"
    DATAGEN = "datagen"
    ROLE = "role"
    GRANT = "grant"


@dataclass(frozen=True, order=True)
class Address:
    """A resource's identity: its kind and its dotted name."""

    kind: Kind
    name: str

    def __str__(self) -> str:
        return f"{self.kind.value}.{self.name}"

    def __hash__(self) -> int:
        # consistent with the generated __eq__; Enum.__hash__ is Python code and made up ~15% of building and
        # sorting a 10,000-relation graph
        return hash((self.kind._value_, self.name))

    @classmethod
    def parse(cls, text: str) -> Address:
        kind, _, name = text.partition(".")
        return cls(Kind(kind), name)
