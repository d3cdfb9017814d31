"""The state backend registry: where the deployed state can be kept, and the `state:` settings each backend takes.

Like the store registry (core/stores.py) it names module paths, not modules: the loader validates `state:` against
it without importing any adapter, and adapters/state/ imports only the backend a project names. Adding a backend is
one module under adapters/state/ (a `from_settings(settings, root, environment)`) plus one entry here.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class BackendKind:
    """One state backend: its name in dsflow.yml, its implementation's module, and its settings."""

    name: str
    module: str
    settings: frozenset[str] = frozenset()
    """The `state:` keys it takes besides `backend` and `path`."""
    required: frozenset[str] = frozenset()


BACKENDS: dict[str, BackendKind] = {kind.name: kind for kind in (
    BackendKind("local", "dsflow.adapters.state.local"),
    BackendKind("s3", "dsflow.adapters.state.s3", frozenset({"bucket", "prefix", "endpoint_url", "region"}),
                frozenset({"bucket"})),
    BackendKind("postgres", "dsflow.adapters.state.postgres", frozenset({"dsn", "table"}), frozenset({"dsn"})),
)}

SETTINGS: frozenset[str] = frozenset().union(*(kind.settings for kind in BACKENDS.values()))
"""Every backend's own `state:` keys."""


def problems(backend: str, given: set[str]) -> list[str]:
    """What is wrong with `state:` naming `backend` and setting the backend keys `given`: an unknown backend (with a
    guess), a key another backend takes, a key this one needs."""
    kind = BACKENDS.get(backend)
    if kind is None:
        guess = difflib.get_close_matches(backend, BACKENDS, n=1, cutoff=0.5)
        return [f"unknown state backend '{backend}'" + (f" (did you mean '{guess[0]}'?)" if guess else "")
                + f"; one of {', '.join(BACKENDS)}"]
    found = []
    if foreign := given - kind.settings:
        found.append(f"not a setting of the {backend} state backend: {', '.join(sorted(foreign))}")
    if missing := kind.required - given:
        found.append(f"the {backend} state backend needs {', '.join(sorted(missing))}")
    return found
