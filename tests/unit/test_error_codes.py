"""Every error code dsflow raises has its own row in docs/errors.md."""

from __future__ import annotations

import re

from support.projects import REPO

CODE = re.compile(r"DSF-[EW]\d{3}")


def test_every_code_in_the_source_is_documented() -> None:
    used = {code for path in (REPO / "dsflow").rglob("*.py") for code in CODE.findall(path.read_text())}
    documented = set(CODE.findall((REPO / "docs" / "errors.md").read_text()))
    assert used, "no codes found"
    assert sorted(used - documented) == [], "add these codes to docs/errors.md"
    rows = set(re.findall(r"^\| (DSF-[EW]\d{3}) \|", (REPO / "docs" / "errors.md").read_text(), re.MULTILINE))
    assert sorted(used - rows) == [], "these codes are mentioned in docs/errors.md but have no row of their own"
