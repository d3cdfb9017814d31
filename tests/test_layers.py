"""The layers and forbidden imports declared in pyproject.toml ([tool.importlinter]) hold, and no dsflow module takes
part in an import cycle (docs/architecture.md, "Layers")."""

from __future__ import annotations

import subprocess
import sys

import grimp
import networkx as nx

from projects import REPO

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
