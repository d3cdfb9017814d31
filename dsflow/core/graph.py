"""The dependency graph keyed by Address: adjacency dicts, with networkx only for reporting cycles.

An edge u -> v means v depends on u: u is created first and deleted last.

It was a thin wrapper over networkx.DiGraph; importing networkx took ~165 ms of every `dsflow` command
(docs/benchmarks.md, "Plan time: where it goes"), so the operations a plan needs are done here on dicts that
keep insertion order (the same orders networkx gave), and networkx is imported only when a graph has a cycle
(`cycles()` lists them with `nx.simple_cycles`; `order()` raises `nx.NetworkXUnfeasible` as before).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

from dsflow.core.address import Address, Kind


class Graph:
    """Resources and their dependencies."""

    def __init__(self, nodes: Iterable[Address] = (), edges: Iterable[tuple[Address, Address]] = ()):
        self._succ: dict[Address, dict[Address, None]] = {}
        self._pred: dict[Address, dict[Address, None]] = {}
        for node in nodes:
            self._add_node(node)
        for u, v in edges:
            self._add_edge(u, v)

    def _add_node(self, node: Address) -> None:
        if node not in self._succ:
            self._succ[node] = {}
            self._pred[node] = {}

    def _add_edge(self, u: Address, v: Address) -> None:
        self._add_node(u)
        self._add_node(v)
        self._succ[u][v] = None
        self._pred[v][u] = None

    @classmethod
    def from_dependencies(cls, deps: Mapping[Address, Iterable[Address]]) -> Graph:
        """The graph of `deps` (node -> the nodes it needs; needs that are no key are ignored). The adjacency dicts
        are filled directly, in the order `_add_edge` would: a plan builds this graph three times."""
        graph = cls()
        succ: dict[Address, dict[Address, None]] = {node: {} for node in deps}
        pred: dict[Address, dict[Address, None]] = {node: {} for node in deps}
        for node, needs in deps.items():
            into = pred[node]
            for need in needs:
                out = succ.get(need)
                if out is not None:
                    out[node] = None
                    into[need] = None
        graph._succ, graph._pred = succ, pred
        return graph

    @property
    def nodes(self) -> list[Address]:
        return list(self._succ)

    def edges(self) -> list[tuple[Address, Address]]:
        return [(u, v) for u, succ in self._succ.items() for v in succ]

    def cycles(self) -> list[list[Address]]:
        if self._sorted(_sort_key) is not None:
            return []
        return [sorted(c) for c in _nx_simple_cycles(self)]

    def order(self) -> list[Address]:
        """Creation order: dependencies first; ties broken by kind then name, so it is stable."""
        ordered = self._sorted(_sort_key)
        if ordered is None:
            import networkx as nx

            raise nx.NetworkXUnfeasible("Graph contains a cycle or graph changed during iteration")
        return ordered

    def _sorted(self, key) -> list[Address] | None:
        """networkx's lexicographical_topological_sort (heap of (key, insertion index)); None if there is a cycle."""
        index = {n: i for i, n in enumerate(self._succ)}
        indegree = {n: len(p) for n, p in self._pred.items() if p}
        heap = [(key(n), index[n], n) for n, p in self._pred.items() if not p]
        heapq.heapify(heap)
        out = []
        while heap:
            node = heapq.heappop(heap)[2]
            for child in self._succ[node]:
                indegree[child] -= 1
                if indegree[child] == 0:
                    heapq.heappush(heap, (key(child), index[child], child))
                    del indegree[child]
            out.append(node)
        return None if indegree else out

    def ancestors(self, node: Address) -> set[Address]:
        return _reach(self._pred, node)

    def descendants(self, node: Address) -> set[Address]:
        return _reach(self._succ, node)

    def dependencies(self, node: Address) -> list[Address]:
        return sorted(self._pred.get(node, ()))

    def dependents(self, node: Address) -> list[Address]:
        return sorted(self._succ.get(node, ()))

    def roots(self) -> list[Address]:
        return sorted(n for n, p in self._pred.items() if not p)


_Node = TypeVar("_Node", bound=Hashable)


def has_cycle(deps: Mapping[_Node, Iterable[_Node]]) -> bool:
    """Whether the dependencies (node -> the nodes it needs; needs that are no key are ignored, as in
    `Graph.from_dependencies`) have a cycle. Kahn's algorithm on the plain keys, without building a Graph of
    Addresses: the cheap check before `Graph.cycles()` names the cycles."""
    indegree = dict.fromkeys(deps, 0)
    dependents: dict[_Node, list[_Node]] = {}
    for node, needs in deps.items():
        for need in needs:
            if need in indegree:
                indegree[node] += 1
                dependents.setdefault(need, []).append(node)
    ready = [node for node, count in indegree.items() if count == 0]
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        for dependent in dependents.get(node, ()):
            indegree[dependent] -= 1
            if indegree[dependent] == 0:
                ready.append(dependent)
    return done < len(indegree)


def reaches(edges: Mapping[_Node, Iterable[_Node]], start: _Node, goal: _Node) -> bool:
    """Whether `goal` is `start` or reachable from it through `edges` (node -> the nodes it leads to; a node that
    is no key leads nowhere)."""
    seen: set[_Node] = set()
    todo = [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(edges.get(node, ()))
    return False


def _reach(adjacency: dict[Address, dict[Address, None]], node: Address) -> set[Address]:
    """Every node reachable from `node` (not `node` itself unless on a cycle through it, as in networkx)."""
    seen: set[Address] = set()
    stack = list(adjacency.get(node, ()))
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(adjacency[current])
    seen.discard(node)
    return seen


def _nx_simple_cycles(graph: Graph):
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(graph.nodes)
    g.add_edges_from(graph.edges())
    return nx.simple_cycles(g)


_KIND_INDEX = {kind._value_: i for i, kind in enumerate(Kind)}  # by value: hashing a str is faster than an Enum


def _sort_key(address: Address) -> tuple[int, str]:
    return (_KIND_INDEX[address.kind._value_], address.name)
