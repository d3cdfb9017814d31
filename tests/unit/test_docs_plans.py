"""docs/plan.md shows real plans: the golden plan text of every category appears in it verbatim.

If a golden file changes (DSFLOW_UPDATE_GOLDEN=1), copy the new text into docs/plan.md too.
"""

from __future__ import annotations

import pytest

from support.projects import REPO
from test_plan_golden import GOLDEN

DOC = (REPO / "docs" / "plan.md").read_text()


@pytest.mark.parametrize("category", ["in_place", "keep_checkpoint", "carry_offsets", "replay", "replace_relation",
                                      "forced_replace", "forced_reset_checkpoint", "forced_paused", "blue_green"])
def test_the_golden_plan_of_each_category_is_in_the_docs(category: str) -> None:
    text = (GOLDEN / "categories" / f"{category}.txt").read_text()
    assert text in DOC, f"docs/plan.md no longer shows tests/golden/categories/{category}.txt; copy it over"


def test_the_markdown_example_is_real() -> None:
    text = (GOLDEN / "categories" / "keep_checkpoint.md").read_text()
    assert text in DOC
