"""YAML parsing that remembers where each value came from."""

from __future__ import annotations

from typing import Any

import yaml

from dsflow.errors import Diagnostic, Location


class ProjectLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false, so `on:` and `no` stay strings. A key written twice in
    one mapping is noted in `duplicates` (PyYAML keeps the last one silently)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.duplicates: list[tuple[Any, yaml.Node, yaml.Node]] = []

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            self._note_duplicates(node)
        return super().construct_mapping(node, deep=deep)

    def _note_duplicates(self, node: yaml.MappingNode) -> None:
        """Each key written again in this mapping, with the first and the repeated key node (merge keys `<<`
        are YAML's own way to repeat keys and are left out)."""
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: PyYAML reports it itself
                continue
            if first is not key_node:
                self.duplicates.append((key, first, key_node))


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
    """Parse one document; a syntax error becomes DSF-E001 at its line and column, a character YAML does not allow
    (NUL, another control character) DSF-E001 too, nesting too deep to parse DSF-E202, and a key written twice in a
    mapping DSF-E203 at the second one. On any of these the data is None."""
    try:
        node, data, duplicates = _compose_and_construct(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        loc = Location(path, mark.line + 1, mark.column + 1) if mark else Location(path)
        return None, Positioned(path, None), [Diagnostic("DSF-E001", f"YAML syntax error: {err.problem}", loc,
                                                          hint="check indentation and quoting")]
    except yaml.reader.ReaderError as err:
        return None, Positioned(path, None), [Diagnostic(
            "DSF-E001", f"YAML syntax error: the character U+{err.character:04X} is not allowed in YAML",
            _offset_location(text, err.position, path), hint="remove the control character (or NUL) from the file")]
    except RecursionError:
        return None, Positioned(path, None), [Diagnostic("DSF-E202", "the YAML is nested too deeply to read",
                                                          Location(path), hint="flatten the nested lists or mappings")]
    if duplicates:
        return None, Positioned(path, node), [_duplicate(path, *found) for found in duplicates]
    return data, Positioned(path, node), []


def _duplicate(path: str, key: Any, first: yaml.Node, again: yaml.Node) -> Diagnostic:
    mark = again.start_mark
    return Diagnostic("DSF-E203", f"the key '{key}' is written twice in one mapping",
                      Location(path, mark.line + 1, mark.column + 1),
                      hint=f"first written at line {first.start_mark.line + 1}; YAML would keep only the last one: "
                           "remove one of them")


def _offset_location(text: str, offset: int, path: str) -> Location:
    """The 1-based line and column of a character offset in `text`."""
    line = text.count("\n", 0, offset) + 1
    return Location(path, line, offset - (text.rfind("\n", 0, offset) + 1) + 1)


def _compose_and_construct(text: str) -> tuple[yaml.Node | None, Any, list[tuple[Any, yaml.Node, yaml.Node]]]:
    """The document's node tree, its data and its duplicate keys, from one parse (what yaml.compose and
    yaml.load each parse for)."""
    loader = ProjectLoader(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None), loader.duplicates
    finally:
        loader.dispose()
