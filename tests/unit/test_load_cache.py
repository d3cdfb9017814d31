"""The load cache (dsflow/load/cache.py) and the dict-based graph (dsflow/core/graph.py) give exactly what the
uncached load and networkx give: the references are a load with DSFLOW_CACHE=0 and networkx itself."""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

import networkx as nx
import pytest

import dsflow.load.queries as queries
from dsflow.core.address import Address, Kind
from dsflow.core.graph import Graph
from dsflow.load.project import check_project, load_project
from support.projects import EXAMPLE_VARIABLES, PAGEVIEWS, copy_example, make_project

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from plan_scale import write_dsflow_project  # noqa: E402


def _projects(tmp_path: Path) -> list[tuple[Path, dict]]:
    nexmark = tmp_path / "nexmark"
    shutil.copytree(REPO / "bench" / "nexmark_project", nexmark, ignore=shutil.ignore_patterns(".dsflow"))
    example = copy_example(tmp_path)
    with (example / "sql" / "pipelines.sql").open("a") as sql:
        sql.write(ACCESS_SQL)
    return [(example, EXAMPLE_VARIABLES), (nexmark, {}), (write_dsflow_project(tmp_path / "scale", 60), {})]


ACCESS_SQL = """
CREATE ROLE writer WITH ('inherits' = 'analyst');
GRANT SELECT, INSERT ON STREAM curated.pageviews_enriched TO ROLE writer;
GRANT ROLE writer TO USER "carol@example.com";
"""
"""Access statements in SQL (sql/access_sql.py): the file cache keeps them too (sql/filecache.py)."""


def _count_analyses(monkeypatch) -> list[int]:
    calls = [0]
    real = queries.analyse_select

    def counting(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(queries, "analyse_select", counting)
    return calls


def test_cached_load_equals_uncached_load(tmp_path, monkeypatch):
    for root, variables in _projects(tmp_path):
        monkeypatch.setenv("DSFLOW_CACHE", "0")
        reference = load_project(root, variables=variables)
        assert not (root / ".dsflow" / "cache").exists(), "DSFLOW_CACHE=0 must write nothing"
        monkeypatch.delenv("DSFLOW_CACHE")
        cold = load_project(root, variables=variables)
        assert list((root / ".dsflow" / "cache").glob("load-*.json"))
        calls = _count_analyses(monkeypatch)
        warm = load_project(root, variables=variables)
        monkeypatch.undo()
        assert reference.queries, root
        assert cold == reference and warm == reference, root
        assert calls[0] == 0, f"{root}: the warm load resolved {calls[0]} SELECTs again"


def test_a_changed_input_column_is_seen_through_the_cache(tmp_path, monkeypatch):
    root = write_dsflow_project(tmp_path / "scale", 8)

    def amounts(project) -> set[str]:
        return {next(c.type for c in project.relation(q.sink).columns if c.name == "amount") for q in project.queries}

    assert amounts(load_project(root)) == {"DOUBLE"}
    source = root / "sql" / "sources_00000.sql"
    source.write_text(source.read_text().replace("amount DOUBLE", "amount BIGINT"))
    warm = load_project(root)
    monkeypatch.setenv("DSFLOW_CACHE", "0")
    assert warm == load_project(root)
    assert amounts(warm) <= {"DECIMAL(23, 1)", "DECIMAL(26, 2)"}, "a BIGINT times 1.1 is a DECIMAL in Spark"
    kinds = {c.name: c.type for c in warm.relation("scale.public.s0").columns}
    assert kinds["amount"] == "BIGINT"


def test_a_warm_load_parses_no_unchanged_file(tmp_path, monkeypatch):
    import dsflow.load.project as project_module

    root = write_dsflow_project(tmp_path / "scale", 400)
    reference = load_project(root)
    parsed: list[str] = []
    real = project_module._parse_sql_file
    monkeypatch.setattr(project_module, "_parse_sql_file",
                        lambda text, path: (parsed.append(path), real(text, path))[1])
    assert load_project(root) == reference
    assert parsed == []
    changed = root / "sql" / "queries_00100.sql"
    changed.write_text(changed.read_text().replace("amount > 150 ", "amount > 151 "))
    warm = load_project(root)
    assert parsed == ["sql/queries_00100.sql"]
    assert warm != reference
    assert "`amount` > 151" in next(q.select_sql for q in warm.queries if q.fqn == "scale.public.q150")


def test_diagnostics_of_statements_read_from_the_file_cache_equal_uncached_ones(tmp_path, monkeypatch):
    """A source changes under unchanged query files: their SELECTs are parsed again from the file (DeferredSelect)
    and report at the same places as a load without the cache."""
    root = write_dsflow_project(tmp_path / "scale", 40)
    load_project(root)
    source = root / "sql" / "sources_00000.sql"
    text = source.read_text().replace("CREATE STREAM s2 (id BIGINT, ts BIGINT, user_id", "CREATE STREAM s2 (id BIGINT, "
                                      "ts BIGINT, uid")
    source.write_text(text.replace("CREATE STREAM s5 ", "CREATE STREAM s5x "))
    warm = [str(d) for d in check_project(root).diagnostics]
    monkeypatch.setenv("DSFLOW_CACHE", "0")
    cold = [str(d) for d in check_project(root).diagnostics]
    assert any("DSF-E040" in d and "queries_00000.sql:" in d for d in cold), cold
    assert any("DSF-E041" in d and "queries_00000.sql:" in d for d in cold), cold
    assert warm == cold


def test_errors_are_reported_again_on_every_load(tmp_path):
    root = make_project(tmp_path, {"sql/sources.sql": PAGEVIEWS,
                                   "sql/bad.sql": "CREATE STREAM bad AS SELECT nope FROM pageviews;\n"})
    first = [str(d) for d in check_project(root).diagnostics]
    second = [str(d) for d in check_project(root).diagnostics]
    assert any("DSF-E041" in d for d in first)
    assert first == second


def test_no_secret_reaches_the_cache_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_FILTER", "s3cr3t-never-on-disk")
    root = make_project(tmp_path, {"sql/sources.sql": PAGEVIEWS, "sql/secret.sql": (
        "CREATE STREAM filtered AS SELECT * FROM pageviews WHERE userid <> '{{ env_var('SECRET_FILTER') }}';\n"
        "CREATE STREAM plain AS SELECT * FROM pageviews WHERE userid <> 'anyone';\n")})
    project = load_project(root)
    assert any("s3cr3t-never-on-disk" in q.select_sql for q in project.queries)
    cached = (root / ".dsflow" / "cache" / "load-dev.json").read_text()
    assert "anyone" in cached and "s3cr3t-never-on-disk" not in cached
    assert load_project(root) == project


def _random_graph(rng: random.Random, n: int, edges: int, acyclic: bool) -> list[tuple[Address, Address]]:
    nodes = [Address(rng.choice(list(Kind)), f"n{i}") for i in range(n)]
    pairs = []
    for _ in range(edges):
        a, b = rng.sample(range(n), 2)
        if acyclic and a > b:
            a, b = b, a
        pairs.append((nodes[a], nodes[b]))
    return nodes, pairs


@pytest.mark.parametrize("seed", range(30))
def test_graph_matches_networkx(seed):
    rng = random.Random(seed)
    nodes, edges = _random_graph(rng, rng.randint(2, 25), rng.randint(0, 40), acyclic=seed % 3 != 0)
    ours = Graph(nodes, edges)
    ref = nx.DiGraph()
    ref.add_nodes_from(nodes)
    ref.add_edges_from(edges)
    assert ours.nodes == list(ref.nodes) and ours.edges() == list(ref.edges)
    assert ours.cycles() == [sorted(c) for c in nx.simple_cycles(ref)]
    if nx.is_directed_acyclic_graph(ref):
        key = lambda a: (list(Kind).index(a.kind), a.name)  # noqa: E731
        assert ours.order() == list(nx.lexicographical_topological_sort(ref, key=key))
    else:
        with pytest.raises(nx.NetworkXUnfeasible):
            ours.order()
    for node in nodes:
        assert ours.ancestors(node) == nx.ancestors(ref, node)
        assert ours.descendants(node) == nx.descendants(ref, node)
        assert ours.dependencies(node) == sorted(ref.predecessors(node))
        assert ours.dependents(node) == sorted(ref.successors(node))
    assert ours.roots() == sorted(n for n in ref.nodes if ref.in_degree(n) == 0)


def test_a_warm_load_imports_no_sqlglot(tmp_path: Path) -> None:
    """With every file and SELECT in the cache, a load (each warm `plan` and `validate`) never imports sqlglot, which
    costs ~0.3 s of every such run: grants in YAML and SQL, a changelog and CREATE STREAM AS SELECT included."""
    import os
    import subprocess

    root = copy_example(tmp_path)
    with (root / "sql" / "pipelines.sql").open("a") as sql:
        sql.write(ACCESS_SQL)
    load_project(root, variables=EXAMPLE_VARIABLES)  # fills the cache
    code = ("import sys; from pathlib import Path; from dsflow.load.project import load_project; "
            f"load_project(Path({str(root)!r}), variables={EXAMPLE_VARIABLES!r}); "
            "print(sorted(m for m in ('sqlglot', 'pyspark') if m in sys.modules))")
    env = {k: v for k, v in os.environ.items() if k != "DSFLOW_CACHE"}
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]"
