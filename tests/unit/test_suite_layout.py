"""The suite's own layout (docs/testing.md, "Where the tests live")."""

from __future__ import annotations

from collections import Counter

from support.projects import REPO

TIERS = ("unit", "integration", "e2e")


def test_test_file_names_are_unique_across_the_tiers() -> None:
    """Test modules are imported by their base name (rootdir-relative, no packages): two files of one name in two
    tiers stop the collection of both (`import file mismatch`), which a run of one tier alone does not show."""
    names = Counter(path.name for tier in TIERS for path in (REPO / "tests" / tier).glob("test_*.py"))
    assert not [name for name, count in names.items() if count > 1]


def test_every_test_file_lives_in_a_tier() -> None:
    assert not sorted(p.name for p in (REPO / "tests").glob("test_*.py"))
