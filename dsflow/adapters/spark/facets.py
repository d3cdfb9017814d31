"""The `spark` facet of the store protocol (core/stores.py): what the query driver asks a store kind.

A query spec names where each source reads and where the sink writes by a spec kind (`SourceSpec.kind`,
`SinkSpec.kind`): a data source, a table format, a change stream. Each store kind's facet
(adapters/<store>/spark.py, object `SPARK`) lists the spec kinds it builds in `kinds`, so translate.py finds a
facet by the store type of a relation (`for_store`) and the driver by the spec's kind (`for_kind`); neither
names a store. Materialized views kept by dsflow itself (no store) have their facet in LOCAL_VIEWS.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any, Protocol

from dsflow.core import stores

LOCAL_VIEWS = "dsflow.adapters.sqlite.spark"
"""The facet of a materialized view without a store: a table in dsflow's own SQLite file beside the state."""
TERMINAL = "console"
"""The sink kind of a query followed in the terminal (`dsflow query --follow`): no facet, the rows are printed."""


class SparkFacet(Protocol):
    """One store kind's side of the query driver (implemented in adapters/<store>/spark.py)."""

    kinds: tuple[str, ...]
    """The spec kinds (SourceSpec.kind, SinkSpec.kind) it reads or writes."""
    async_checkpoint: bool
    """Its sink tolerates replays the way Spark's own log sink does (Spark's async progress tracking)."""

    def source_fields(self, project: Any, query: Any, store: Any, relation: Any) -> dict[str, Any]:
        """The store-specific fields of the SourceSpec reading `relation` (kind, client_config, options, format)."""

    def sink_spec(self, project: Any, query: Any, store: Any, relation: Any, columns: list[str]) -> Any:
        """The SinkSpec of a query writing `relation`."""

    def data_sources(self) -> list[type]:
        """The Spark Python data sources its reads and writes go through (registered in every session)."""

    def stream(self, spark: Any, spec: Any, source: Any) -> Any:
        """The streaming DataFrame of one source (rows key, value or __value, timestamp, ...)."""

    def client_option(self, setting: str) -> str:
        """The data source option a client setting is passed as (named in `secret.options`)."""

    def value_layout(self, source: Any) -> str:
        """How the source's values reach Spark (formats/decoding.py: TEXT, STRUCT or BOTH)."""

    def sink_rows(self, result: Any, sink: Any) -> Any:
        """The rows its sink writes, made from the query's result (a log: key and value)."""

    def start(self, spec: Any, frame: Any, trigger: dict[str, Any], options: dict[str, str]) -> Any:
        """Start the streaming query writing `frame` into the sink; `options`: the driver's own writer options
        (Spark's async progress tracking, only when the facet says `async_checkpoint`)."""

    def lag_reader(self) -> Any | None:
        """An object whose `ends(client_config, topic)` gives a log's end offsets per partition and `close()` frees
        its clients; None if the store's offsets are not counts of records (lag is not measured)."""


@cache
def _by_kind() -> dict[str, SparkFacet]:
    found: dict[str, SparkFacet] = {}
    for kind in stores.REGISTRY.values():
        facet = kind.facet("spark")
        if facet is not None:
            found.update(dict.fromkeys(facet.kinds, facet))
    local = importlib.import_module(LOCAL_VIEWS).SPARK
    return found | dict.fromkeys(local.kinds, local)


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
