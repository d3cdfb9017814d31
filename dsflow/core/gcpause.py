"""The cyclic garbage collector paused around the bulk stages (loading a project, making a plan).

Loading builds millions of small objects (sqlglot trees, pydantic models) and keeps most of them;
the collector's full passes over them free next to nothing and took ~25-30% of loading and
planning a 10,000-relation project (docs/benchmarks.md, "Plan time"). Reference counting still
frees memory while paused; the collector's previous state is restored afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_entry_point = False
"""True in the dsflow executable (its `main()` calls `freeze()`): the process ends with its one command."""


@contextmanager
def paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def freeze() -> None:
    """Move every object alive now to the collector's permanent generation (`gc.freeze`), for a process's entry
    point only.

    Called once the CLI's modules are imported (classes, pydantic schemas, jinja internals: kept until exit
    anyway), the collector stops walking them in its passes while the command runs and in its final
    collection at exit (~70 ms of a warm `dsflow plan` of 1,000 relations). The cost: a frozen object that later
    becomes garbage inside a reference cycle is not freed before the process exits.
    """
    global _entry_point
    _entry_point = True
    gc.freeze()


@contextmanager
def command() -> Iterator[None]:
    """`paused()` around a whole short command (`dsflow plan`, `dsflow validate`); in the dsflow executable (after
    `freeze()`) the collector is left off when the command is done.

    Re-enabling it after a bulk stage makes the next allocation collect the youngest generation, which then holds
    every object the stage made (~60 ms after loading 1,000 relations) only to keep them all, moments before the
    process exits and frees everything anyway. Anywhere else (a test calling the command in its own process) the
    collector's state is restored as by `paused()`.
    """
    if _entry_point:
        gc.disable()
        yield
        return
    with paused():
        yield
