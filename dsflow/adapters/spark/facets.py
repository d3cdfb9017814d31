"""The `spark` facet of the store protocol (core/protocol.py SparkFacet): how the query driver finds a store kind's.

A query spec names where each source reads and where the sink writes by a spec kind (`SourceSpec.kind`,
`SinkSpec.kind`): a data source, a table format, a change stream. Each store kind's facet
(adapters/<store>/spark.py, object `SPARK`) lists the spec kinds it builds in `kinds`, so translate.py finds a
facet by the store type of a relation (`for_store`) and the driver by the spec's kind (`for_kind`); neither
names a store. Materialized views kept by dsflow itself (no store) have their facet in LOCAL_VIEWS.
"""

from __future__ import annotations

import importlib
from functools import cache

from dsflow.core import stores
from dsflow.core.protocol import SparkFacet

LOCAL_VIEWS = f"{stores.LOCAL_VIEWS}.spark"
"""The facet of a materialized view without a store: a table in dsflow's own SQLite file beside the state."""
TEST_SOURCES = "dsflow.adapters.spark.testsource"
"""The facet of `dsflow test`'s input: a test's records fed batch by batch, no store behind them."""
TERMINAL = "console"
"""The sink kind of a query followed in the terminal (`dsflow query --follow`): no facet, the rows are printed."""


@cache
def _by_kind() -> dict[str, SparkFacet]:
    found: dict[str, SparkFacet] = {}
    for kind in stores.REGISTRY.values():
        facet = kind.facet("spark")
        if facet is not None:
            found.update(dict.fromkeys(facet.kinds, facet))
    local, tests = (importlib.import_module(name).SPARK for name in (LOCAL_VIEWS, TEST_SOURCES))
    return found | dict.fromkeys(local.kinds, local) | dict.fromkeys(tests.kinds, tests)


def for_kind(kind: str) -> SparkFacet | None:
    """The facet that builds a spec kind; None for the terminal (or a kind no store builds)."""
    return _by_kind().get(kind)


def for_store(store_type: str) -> SparkFacet:
    """The facet of a store type (a relation's store)."""
    facet = stores.facet(store_type, "spark")
    if facet is None:
        raise ValueError(f"store type {store_type!r} has no Spark source or sink")
    return facet


def all_facets() -> list[SparkFacet]:
    """Every facet once, in the registry's order (the local views' last)."""
    return list({id(facet): facet for facet in _by_kind().values()}.values())


def local_views() -> SparkFacet:
    return importlib.import_module(LOCAL_VIEWS).SPARK


def sink_kind(value: str) -> str:
    """A SinkSpec's kind: one a facet writes, or the terminal."""
    if value != TERMINAL and value not in _by_kind():
        raise ValueError(f"unknown sink kind {value!r}: one of {', '.join([*_by_kind(), TERMINAL])}")
    return value
