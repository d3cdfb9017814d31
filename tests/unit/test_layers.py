"""The layers and forbidden imports declared in pyproject.toml ([tool.importlinter]) hold, and no dsflow module takes
part in an import cycle (docs/architecture.md, "Layers")."""

from __future__ import annotations

import subprocess
import sys

import grimp
import networkx as nx

from support.projects import REPO

LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def _lint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LINT, "--no-cache", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The modules of each import cycle (every import counts, also one inside a function)."""
    edges = nx.DiGraph()
    for module in graph.modules:
        edges.add_node(module)
        edges.add_edges_from((module, imported) for imported in graph.find_modules_directly_imported_by(module))
    return sorted(sorted(c) for c in nx.strongly_connected_components(edges) if len(c) > 1)


def _imports_within(graph: grimp.ImportGraph, cycle: list[str]) -> str:
    """Each import between modules of a cycle, with its line numbers: the ones to break it at."""
    lines = []
    for a in cycle:
        for b in cycle:
            if graph.direct_import_exists(importer=a, imported=b):
                found = graph.get_import_details(importer=a, imported=b)
                lines.append(f"{a} -> {b} (l.{', '.join(str(d['line_number']) for d in found)})")
    return "\n".join(lines)


def test_lint_imports_keeps_every_contract() -> None:
    done = _lint()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout, done.stdout


def test_a_broken_layer_fails_lint_imports(tmp_path) -> None:
    """The same tool with core declared above load (load imports core everywhere) must fail."""
    config = tmp_path / "reversed.toml"
    config.write_text('[tool.importlinter]\nroot_package = "dsflow"\n\n[[tool.importlinter.contracts]]\n'
                      'name = "reversed"\ntype = "layers"\nlayers = ["dsflow.core", "dsflow.load"]\n')
    done = _lint(str(config))
    assert done.returncode != 0, done.stdout
    assert "reversed BROKEN" in done.stdout and "dsflow.load is not allowed to import dsflow.core" in done.stdout


def test_no_import_cycles_among_dsflow_modules() -> None:
    graph = grimp.build_graph("dsflow", cache_dir=None)
    assert len(graph.modules) > 100
    cycles = _cycles(graph)
    assert cycles == [], "\n".join(_imports_within(graph, cycle) for cycle in cycles)


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        graph.add_import(importer=importer, imported=imported)
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_the_loader_knows_the_generators_datagen_has() -> None:
    """load/ checks generator names against core/generators.py, so it never imports the generator process (engine)."""
    from dsflow.core.generators import GENERATOR_NAMES
    from dsflow.datagen import GENERATORS

    assert tuple(GENERATORS) == GENERATOR_NAMES


SOURCE_MODULES = ("from dsflow.adapters.spark.facets import all_facets; "
                  "print(' '.join(sorted({s.__module__ for f in all_facets() for s in f.data_sources()})))")
LEAN = ("import sys, importlib; [importlib.import_module(m) for m in sys.argv[1:]]; "
        "print(' '.join(sorted({'pydantic', 'sqlglot'} & {m.split('.')[0] for m in sys.modules})))")


def test_spark_python_processes_import_no_model_and_no_sql_parser() -> None:
    """Spark's Python processes (a query's source runner, the planning workers, the tasks) import the data sources'
    modules; pydantic (the models) and sqlglot are the loader's and cost each such process ~8 MB and ~30 MB
    (docs/benchmarks.md, "50 queries"). A module that imports either again at its top fails this."""
    named = subprocess.run([sys.executable, "-c", SOURCE_MODULES], cwd=REPO, capture_output=True, text=True,
                           timeout=120, check=True).stdout.split()
    assert "dsflow.adapters.kafka.datasource" in named and len(named) >= 4, named
    done = subprocess.run([sys.executable, "-c", LEAN, *named], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "", f"{named} import {done.stdout.strip()}"


def test_spark_types_spelled_without_sqlglot_agree_with_it() -> None:
    from sqlglot import exp

    from dsflow.formats.arrow import SPARK_SCALARS, spark_type

    for name, spelled in SPARK_SCALARS.items():
        assert spelled == exp.DataType.build(name).sql(dialect="spark"), name
        assert spark_type(f" {name.lower()} ") == spelled
    assert spark_type("DECIMAL(10, 2)") == exp.DataType.build("DECIMAL(10, 2)").sql(dialect="spark")
