"""The linter and the type checker configured in pyproject.toml ([tool.ruff], [tool.mypy]) find nothing: ruff over
dsflow/, tests/ and bench/, mypy over dsflow/ (docs/dependencies.md, "Test extra")."""

from __future__ import annotations

import subprocess
import sys

from support.projects import REPO


def _run(*args: str) -> subprocess.CompletedProcess:
    # a cold mypy run over dsflow/ takes ~45 s here; its cache (.mypy_cache/, ignored by git) makes the next one ~2 s
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=540)


def test_ruff_finds_nothing() -> None:
    done = _run("ruff", "check", "dsflow", "tests", "bench")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing() -> None:
    done = _run("mypy")
    assert done.returncode == 0, done.stdout + done.stderr
