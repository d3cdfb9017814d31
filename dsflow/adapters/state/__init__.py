"""State backends: read, write and lock the deployed state (see docs/state.md).

A backend is one module implementing `StateBackend` (base.py), registered in core/backends.py by the name
`state.backend` takes in dsflow.yml. boto3 and psycopg2 are imported inside their modules only.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from dsflow.adapters.state.base import LockInfo, StateBackend
from dsflow.core import backends
from dsflow.core.model import Project, StateSettings
from dsflow.core.resources import has_secrets
from dsflow.core.secrets import Redactor
from dsflow.errors import DsflowError

__all__ = ["BACKENDS", "LockInfo", "StateBackend", "make_backend", "redactor"]

BACKENDS: dict[str, str] = {name: kind.module for name, kind in backends.BACKENDS.items()}
"""Backend name -> the module whose `from_settings(settings, root, environment)` makes it (core/backends.py),
imported when used (a plan on local state does not read the s3 and postgres modules)."""


def make_backend(settings: StateSettings, root: Path, environment: str) -> StateBackend:
    """The backend `settings` name, for one environment of the project at `root`."""
    module = BACKENDS.get(settings.backend)
    if module is None:
        raise DsflowError("DSF-E805", f"unknown state backend '{settings.backend}'",
                          hint=f"state.backend is one of {', '.join(sorted(BACKENDS))}")
    return importlib.import_module(module).from_settings(settings, root, environment)


def redactor(project: Project, backend: StateBackend) -> Redactor:
    """The markers for the project's secret values: keyed by the backend's redaction key, which is asked for (and
    made, the first time) only when the project has secrets."""
    return Redactor(backend.redaction_key()) if has_secrets(project) else Redactor()
