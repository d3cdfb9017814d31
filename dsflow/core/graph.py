"""The dependency graph: a thin wrapper over networkx.DiGraph keyed by Address.

An edge u -> v means v depends on u: u is created first and deleted last.
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

from dsflow.core.address import Address, Kind


class Graph:
    """Resources and their dependencies."""

    def __init__(self, nodes: Iterable[Address] = (), edges: Iterable[tuple[Address, Address]] = ()):
        self._g: nx.DiGraph = nx.DiGraph()
        self._g.add_nodes_from(nodes)
        self._g.add_edges_from(edges)

    @classmethod
    def from_dependencies(cls, deps: dict[Address, Iterable[Address]]) -> Graph:
        graph = cls(deps.keys())
        for node, needs in deps.items():
            for need in needs:
                if need in deps:
                    graph._g.add_edge(need, node)
        return graph

    @property
    def nodes(self) -> list[Address]:
        return list(self._g.nodes)

    def edges(self) -> list[tuple[Address, Address]]:
        return list(self._g.edges)

    def cycles(self) -> list[list[Address]]:
        return [sorted(c) for c in nx.simple_cycles(self._g)]

    def order(self) -> list[Address]:
        """Creation order: dependencies first; ties broken by kind then name, so it is stable."""
        return list(nx.lexicographical_topological_sort(self._g, key=_sort_key))

    def ancestors(self, node: Address) -> set[Address]:
        return nx.ancestors(self._g, node) if node in self._g else set()

    def descendants(self, node: Address) -> set[Address]:
        return nx.descendants(self._g, node) if node in self._g else set()

    def dependencies(self, node: Address) -> list[Address]:
        return sorted(self._g.predecessors(node)) if node in self._g else []

    def dependents(self, node: Address) -> list[Address]:
        return sorted(self._g.successors(node)) if node in self._g else []

    def roots(self) -> list[Address]:
        return sorted(n for n in self._g.nodes if self._g.in_degree(n) == 0)


def _sort_key(address: Address) -> tuple[int, str]:
    return (list(Kind).index(address.kind), address.name)
