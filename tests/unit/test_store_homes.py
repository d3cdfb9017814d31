"""One home per store (issue 26): how many files outside a store kind's own folder name it.

A store kind lives in its folder under dsflow/adapters/ and in its entry of the registry (dsflow/core/stores.py);
everything else asks the registry. This counts, for each store type, the dsflow modules outside its home that name
it (any case, also in docstrings and messages) and fails when a count rises above its ceiling. The target is at most 2
for every store besides the registry (TARGET); each ceiling is the count today, lowered as code moves behind the
protocol. A word that names something else is not the store: the confluent-kafka library, an `s3://` or
`postgresql+psycopg2://` URI, and the state backends `s3` and `postgres` (their own registry, core/backends.py and
adapters/state/, and their settings in core/model.py and load/raw.py). `PYTHONPATH=. python
tests/unit/test_store_homes.py` prints the counts and the files.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from dsflow.core import stores
from dsflow.load.project import check_project
from support.projects import REPO, make_project

PACKAGE = REPO / "dsflow"

NAMES = {"kafka": r"(?<!confluent[-_])kafka", "kinesis": r"kinesis", "postgresql": r"postgres(?!ql\+)",
         "s3": r"\bs3\b(?!://)",
         "adls": r"\badls\b", "databricks": r"databricks", "snowflake": r"snowflake", "iceberg": r"iceberg",
         "delta": r"\bdelta\b"}
"""Store type (and 'delta', the table format of the s3, filesystem, adls and databricks stores) -> how it is named."""

HOMES = {"delta": "dsflow.adapters.tables"} | {t: k.package for t, k in stores.REGISTRY.items()}

STATE_BACKENDS = ("dsflow/adapters/state/", "dsflow/core/backends.py")
"""Where the state backends (not stores) named s3 and postgres live."""
STATE_SETTINGS = ("StateSettings", "RawState")
"""The `state:` settings (backend: local|s3|postgres, and the fields each backend takes) in core/model.py and
load/raw.py: they name state backends, not stores."""


def _without_state_settings(source: str) -> str:
    """The module's text without the classes and assignments that declare the state backends' settings."""
    lines = source.splitlines()
    for node in ast.parse(source).body:
        names = [node.name] if isinstance(node, ast.ClassDef) else \
            [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if set(names) & set(STATE_SETTINGS):
            lines[node.lineno - 1:node.end_lineno] = [""] * (node.end_lineno - node.lineno + 1)
    return "\n".join(lines)

CEILINGS = {"kafka": 1, "kinesis": 0, "postgresql": 1, "s3": 1, "adls": 1, "databricks": 0, "snowflake": 0,
            "iceberg": 1, "delta": 2}
TARGET = 2
"""Issue 26: at most this many files outside a store's home name it (the registry is not counted)."""


def naming_files(store_type: str) -> list[str]:
    """The modules outside the store's home folder (and the registry) that name it."""
    home = PACKAGE.parent / HOMES[store_type].replace(".", "/")
    pattern = re.compile(NAMES[store_type], re.IGNORECASE)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = str(path.relative_to(PACKAGE.parent))
        if path.is_relative_to(home) or path == PACKAGE / "core" / "stores.py" or relative.startswith(STATE_BACKENDS):
            continue
        if pattern.search(_without_state_settings(path.read_text(encoding="utf-8"))):
            found.append(relative)
    return found


def test_every_registered_store_type_is_counted() -> None:
    assert set(stores.REGISTRY) - {"filesystem"} <= set(NAMES), "name the new store type in NAMES and CEILINGS"


def test_a_store_type_the_registry_does_not_know_is_an_error_at_its_line_with_a_guess(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"stores/kafka.yml": "stores:\n  - name: k\n    type: kafak\n"
                                                       "    bootstrap_servers: 127.0.0.1:1\n"})
    found = [d for d in check_project(root).diagnostics if d.code == "DSF-E012"]
    assert len(found) == 1 and found[0].location.file.endswith("kafka.yml") and found[0].location.line == 3
    assert "unknown store type 'kafak' (did you mean 'kafka'?)" in found[0].message
    assert all(t in found[0].message for t in stores.REGISTRY)


def test_the_ceilings_meet_the_target() -> None:
    assert max(CEILINGS.values()) <= TARGET, CEILINGS


@pytest.mark.parametrize("store_type", sorted(CEILINGS))
def test_files_naming_a_store_outside_its_home_do_not_grow(store_type: str) -> None:
    files = naming_files(store_type)
    assert len(files) <= CEILINGS[store_type], \
        f"{len(files)} files outside {HOMES[store_type]} name {store_type} (ceiling {CEILINGS[store_type]}): " \
        f"ask the store registry (dsflow/core/stores.py) instead:\n" + "\n".join(files)



PROTOCOLS = {"rules": ("StoreRules",), "objects": ("PhysicalObjects",),
             "commands": ("LogCommands", "EntityCommands", "ViewCommands"), "spark": ("SparkFacet",)}


def _declared(names: tuple[str, ...]) -> set[str]:
    from dsflow.core import protocol

    found: set[str] = set()
    for name in names:
        cls = getattr(protocol, name)
        found |= {n for n in vars(cls) if not n.startswith("_")} | set(cls.__annotations__)
    return found


@pytest.mark.parametrize("facet", sorted(PROTOCOLS))
def test_every_member_a_facet_offers_is_declared_in_the_protocol(facet: str) -> None:
    """core/protocol.py is the one place that says what a store kind provides: a member a facet object offers (its
    own configuration, dataclass fields, aside) is declared there."""
    import dataclasses

    declared = _declared(PROTOCOLS[facet])
    undeclared = {}
    for kind in stores.REGISTRY.values():
        found = kind.facet(facet)
        if found is None:
            continue
        config = {f.name for f in dataclasses.fields(found)} if dataclasses.is_dataclass(found) else set()
        extra = {n for n in dir(found) if not n.startswith("_")} - declared - config
        if extra:
            undeclared[kind.type] = sorted(extra)
    assert not undeclared, f"declare these in dsflow/core/protocol.py: {undeclared}"


if __name__ == "__main__":
    for name in sorted(CEILINGS):
        files = naming_files(name)
        print(f"{name}: {len(files)} (ceiling {CEILINGS[name]})\n  " + "\n  ".join(files))
