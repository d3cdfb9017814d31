"""The state backend registry (core/backends.py): `state:` in dsflow.yml is checked against it at its line, and the
adapters import exactly the modules it names."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from dsflow.adapters import state
from dsflow.core import backends
from dsflow.load.project import check_project
from support.projects import make_project


def _errors(tmp_path: Path, state_yaml: str) -> list:
    root = make_project(tmp_path, {"dsflow.yml": f"name: p\n{state_yaml}"})
    return [d for d in check_project(root).diagnostics if d.code == "DSF-E012"]


def test_an_unknown_backend_is_refused_at_its_line_with_a_guess(tmp_path: Path) -> None:
    found = _errors(tmp_path, "state:\n  backend: s4\n  bucket: b\n")
    assert len(found) == 1, found
    assert "unknown state backend 's4' (did you mean 's3'?)" in found[0].message
    assert found[0].location.file.endswith("dsflow.yml") and found[0].location.line in (2, 3)


@pytest.mark.parametrize(("state_yaml", "expected"), [
    ("state:\n  backend: s3\n  dsn: x\n  bucket: b\n", "not a setting of the s3 state backend: dsn"),
    ("state:\n  backend: postgres\n", "the postgres state backend needs dsn"),
    ("state:\n  backend: local\n  table: t\n", "not a setting of the local state backend: table"),
])
def test_settings_of_another_backend_or_missing_ones_are_named(tmp_path: Path, state_yaml: str, expected: str) -> None:
    found = _errors(tmp_path, state_yaml)
    assert [expected in d.message for d in found] == [True], found


def test_every_valid_state_loads_clean(tmp_path: Path) -> None:
    assert _errors(tmp_path, "state:\n  backend: s3\n  bucket: b\n  region: eu-west-1\n") == []


def test_the_adapters_make_each_registered_backend_from_its_module() -> None:
    assert state.BACKENDS == {name: kind.module for name, kind in backends.BACKENDS.items()}
    for kind in backends.BACKENDS.values():
        assert callable(importlib.import_module(kind.module).from_settings), kind.name
        assert kind.required <= kind.settings, kind.name
