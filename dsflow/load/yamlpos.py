"""YAML parsing that remembers where each value came from."""

from __future__ import annotations

from typing import Any

import yaml

from dsflow.errors import Diagnostic, Location


class ProjectLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false, so `on:` and `no` stay strings."""


ProjectLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ProjectLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", __import__("re").compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class Positioned:
    """Parsed YAML plus a lookup from a key path to its line and column."""

    def __init__(self, path: str, root: yaml.Node | None):
        self.path = path
        self._root = root

    def location(self, keys: tuple[Any, ...] = ()) -> Location:
        node = self._root
        for key in keys:
            child = _child(node, key)
            if child is None:
                break
            node = child
        if node is None:
            return Location(self.path, 1, 1)
        return Location(self.path, node.start_mark.line + 1, node.start_mark.column + 1)

    def key_location(self, keys: tuple[Any, ...]) -> Location:
        """Where the last key of `keys` is written: its name, not its value (for an unknown key)."""
        node = self._root
        for key in keys[:-1]:
            node = _child(node, key)
        if keys and isinstance(node, yaml.MappingNode):
            for knode, _ in node.value:
                if knode.value == keys[-1]:
                    return Location(self.path, knode.start_mark.line + 1, knode.start_mark.column + 1)
        return self.location(keys)


def _child(node: yaml.Node | None, key: Any) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for knode, vnode in node.value:
            if knode.value == key:
                return vnode if not isinstance(key, str) or vnode is not None else knode
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
        return node.value[key]
    return None


def parse_yaml(text: str, path: str) -> tuple[Any, Positioned, list[Diagnostic]]:
    """Parse one document; a syntax error becomes DSF-E001 at its line and column."""
    try:
        node, data = _compose_and_construct(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        loc = Location(path, mark.line + 1, mark.column + 1) if mark else Location(path)
        return None, Positioned(path, None), [Diagnostic("DSF-E001", f"YAML syntax error: {err.problem}", loc,
                                                          hint="check indentation and quoting")]
    return data, Positioned(path, node), []


def _compose_and_construct(text: str) -> tuple[yaml.Node | None, Any]:
    """The document's node tree and its data, from one parse (what yaml.compose and yaml.load each parse for)."""
    loader = ProjectLoader(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()
