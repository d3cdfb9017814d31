"""One home per store (issue 26): how many files outside a store kind's own folder name it.

A store kind lives in its folder under dsflow/adapters/ and in its entry of the registry (dsflow/core/stores.py);
everything else asks the registry. This counts, for each store type, the dsflow modules outside its home that name
it (any case, also in docstrings and messages) and fails when a count rises above its ceiling. The target is at most 2
for every store (the registry and one docs-facing text); each ceiling is the count today, lowered as code moves behind
the protocol. A word that names something else is not the store: the confluent-kafka library, an `s3://` or
`postgresql+psycopg2://` URI, and the state backends `s3` and `postgres` (their own registry, adapters/state/). `PYTHONPATH=. python tests/test_store_homes.py` prints the counts and the files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dsflow.core import stores
from dsflow.load.project import check_project
from projects import REPO, make_project

PACKAGE = REPO / "dsflow"

NAMES = {"kafka": r"(?<!confluent[-_])kafka", "kinesis": r"kinesis", "postgresql": r"postgres(?!ql\+)",
         "s3": r"\bs3\b(?!://)",
         "adls": r"\badls\b", "databricks": r"databricks", "snowflake": r"snowflake", "iceberg": r"iceberg",
         "delta": r"\bdelta\b"}
"""Store type (and 'delta', the table format of the s3, filesystem, adls and databricks stores) -> how it is named."""

HOMES = {"delta": "dsflow.adapters.tables"} | {t: k.package for t, k in stores.REGISTRY.items()}

STATE_BACKENDS = ("dsflow/adapters/state/",)
"""Where the state backends (not stores) named s3 and postgres live."""
STATE_SETTINGS = re.compile(r"^.*(backend|\b(s3|postgres): ).*$", re.MULTILINE | re.IGNORECASE)
"""A line of the `state:` settings (backend: local|s3|postgres, and the fields each backend takes)."""

CEILINGS = {"kafka": 1, "kinesis": 0, "postgresql": 2, "s3": 4, "adls": 1, "databricks": 0, "snowflake": 0,
            "iceberg": 1, "delta": 2}


def naming_files(store_type: str) -> list[str]:
    """The modules outside the store's home folder (and the registry) that name it."""
    home = PACKAGE.parent / HOMES[store_type].replace(".", "/")
    pattern = re.compile(NAMES[store_type], re.IGNORECASE)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = str(path.relative_to(PACKAGE.parent))
        if path.is_relative_to(home) or path == PACKAGE / "core" / "stores.py" or relative.startswith(STATE_BACKENDS):
            continue
        if pattern.search(STATE_SETTINGS.sub("", path.read_text(encoding="utf-8"))):
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


@pytest.mark.parametrize("store_type", sorted(CEILINGS))
def test_files_naming_a_store_outside_its_home_do_not_grow(store_type: str) -> None:
    files = naming_files(store_type)
    assert len(files) <= CEILINGS[store_type], \
        f"{len(files)} files outside {HOMES[store_type]} name {store_type} (ceiling {CEILINGS[store_type]}): " \
        f"ask the store registry (dsflow/core/stores.py) instead:\n" + "\n".join(files)


if __name__ == "__main__":
    for name in sorted(CEILINGS):
        files = naming_files(name)
        print(f"{name}: {len(files)} (ceiling {CEILINGS[name]})\n  " + "\n  ".join(files))
