"""The engine boundary (core/engines.py, docs/architecture.md "The engine protocol and adding an engine"): the
registry names modules whose ENGINE has every member of the protocol, and the views dsflow keeps without a store
are reached through the store registry's facets, like a store kind's."""

from __future__ import annotations

import importlib
import inspect
import sqlite3
from pathlib import Path
from types import SimpleNamespace

from dsflow.core import engines, stores
from dsflow.core.engines import Engine, StartAt


def _members(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")} | set(getattr(cls, "__annotations__", {}))


def test_every_registered_engine_has_every_member_of_the_protocol() -> None:
    wanted = _members(Engine)
    assert {"start", "park", "stop", "relaunch", "identity", "committed_offsets", "standbys", "shared"} <= wanted
    for name, module in engines.ENGINES.items():
        engine = importlib.import_module(module).ENGINE
        _assert_implements(engine, Engine, name)
        _assert_implements(engine.standbys, engines.Standbys, f"{name}.standbys")
        _assert_implements(engine.shared, engines.SharedApps, f"{name}.shared")


def _assert_implements(found: object, protocol: type, name: str) -> None:
    wanted = _members(protocol)
    missing = sorted(m for m in wanted if not hasattr(found, m))
    assert not missing, f"engine {name} lacks {missing}"
    for member in wanted:
        declared = getattr(protocol, member, None)
        if callable(declared):  # the same parameters as the protocol's
            assert list(inspect.signature(declared).parameters)[1:] \
                == list(inspect.signature(getattr(found, member)).parameters), (name, member)


def test_the_runtime_asks_the_engine_for_its_standbys_and_shared_applications() -> None:
    """dsflow/runtime/ (the supervisor) imports no engine package: the import contract in pyproject.toml, and here
    the modules as loaded."""
    import sys

    for module in ("dsflow.runtime.standby", "dsflow.runtime.shared", "dsflow.runtime.supervisor",
                   "dsflow.runtime.control"):
        importlib.import_module(module)
        source = Path(sys.modules[module].__file__ or "").read_text()
        assert "dsflow.adapters.spark" not in source and "adapters.sqlite" not in source, module


def test_the_default_engine_is_spark_and_is_asked_once() -> None:
    engine = engines.engine()
    assert engines.DEFAULT == "spark" and engine is engines.engine("spark")
    assert engine.driver_module == "dsflow.adapters.spark.driver"
    assert engine.isolation(SimpleNamespace(runtime=SimpleNamespace(isolation="query")),
                            SimpleNamespace(isolation="shared")) == "shared"


def test_the_translator_uses_the_protocols_start_position() -> None:
    from dsflow.adapters.spark import translate

    assert translate.StartAt is StartAt


def test_views_without_a_store_are_kept_through_their_facets(tmp_path: Path) -> None:
    """Apply's executor of a view without a store and `dsflow query` over it come from the facets of
    core/stores.py LOCAL_VIEWS (SQLite), not from the engine layer."""
    import sqlglot

    from dsflow.adapters.objects import local_views

    objects, commands = stores.local_views("objects"), stores.local_views("commands")
    assert objects is not None and commands is not None
    assert objects.executor({"kind": "materialized_view"}, {}, None) is local_views()
    assert objects.executor({"kind": "stream"}, {}, None) is None
    project = SimpleNamespace(root=tmp_path, state_path=".dsflow/state", environment="dev")
    from dsflow.adapters.sqlite import mv

    path = mv.database_path(tmp_path, ".dsflow/state", "dev")
    mv.ensure_table(path, "v", [("k", "BIGINT"), ("n", "BIGINT")], ["k"])
    with sqlite3.connect(path) as db:
        db.execute('INSERT INTO "v" VALUES (1, 2)')
    assert commands.view_place(None) == ("", None)
    columns, rows = commands.query_views(project, "", "", sqlglot.parse_one('SELECT k, n FROM "v"'))
    assert (list(columns), [tuple(r) for r in rows]) == (["k", "n"], [(1, 2)])
