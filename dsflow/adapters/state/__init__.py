"""State backends: read, write and lock the deployed state (see docs/state.md).

A backend is one module implementing `StateBackend` (base.py), registered in BACKENDS by the name
`state.backend` takes in dsflow.yml. boto3 and psycopg2 are imported inside their modules only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dsflow.adapters.state import local, postgres, s3
from dsflow.adapters.state.base import LockInfo, StateBackend
from dsflow.core.model import StateSettings
from dsflow.errors import DsflowError

__all__ = ["BACKENDS", "LockInfo", "StateBackend", "make_backend"]

BACKENDS: dict[str, Callable[[StateSettings, Path, str], StateBackend]] = {
    "local": local.from_settings,
    "s3": s3.from_settings,
    "postgres": postgres.from_settings,
}


def make_backend(settings: StateSettings, root: Path, environment: str) -> StateBackend:
    """The backend `settings` name, for one environment of the project at `root`."""
    factory = BACKENDS.get(settings.backend)
    if factory is None:
        raise DsflowError("DSF-E805", f"unknown state backend '{settings.backend}'",
                          hint=f"state.backend is one of {', '.join(sorted(BACKENDS))}")
    return factory(settings, root, environment)
