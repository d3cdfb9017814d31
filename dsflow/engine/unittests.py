"""`dsflow test`: the project's query tests (tests/*.yml, load/unittests.py) run by the engine without a broker, and
their JUnit XML report for CI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dsflow.core.engines import engine
from dsflow.core.model import Project
from dsflow.core.unittests import Mismatch, Outcome
from dsflow.load.unittests import load_tests


def run(project: Project, names: tuple[str, ...], on_outcome: Callable[[Outcome], None]) -> list[Outcome]:
    """Load the tests (ProjectError, every problem at its file:line, before anything runs), then run them all."""
    tests = load_tests(project, names)
    return engine().unit_tests(project, tests, on_outcome) if tests else []


def junit_xml(outcomes: list[Outcome], path: Path) -> None:
    """The outcomes as a JUnit XML report (one testsuite 'dsflow', one testcase per test)."""
    import xml.etree.ElementTree as ET

    failures = sum(1 for o in outcomes if o.mismatches and o.error is None)
    errors = sum(1 for o in outcomes if o.error is not None)
    suite = ET.Element("testsuite", name="dsflow", tests=str(len(outcomes)), failures=str(failures),
                       errors=str(errors), time=f"{sum(o.seconds for o in outcomes):.3f}")
    for outcome in outcomes:
        case = ET.SubElement(suite, "testcase", name=outcome.test.name, classname=outcome.test.query,
                             file=outcome.test.location.file, line=str(outcome.test.location.line),
                             time=f"{outcome.seconds:.3f}")
        if outcome.error is not None:
            ET.SubElement(case, "error", message=outcome.error).text = outcome.error
        elif outcome.mismatches:
            text = "\n".join(describe(m) for m in outcome.mismatches)
            ET.SubElement(case, "failure", message=text.splitlines()[0]).text = text
    tree = ET.ElementTree(suite)
    ET.indent(tree)
    path.parent.mkdir(parents=True, exist_ok=True)
    tree.write(path, encoding="utf-8", xml_declaration=True)


def describe(mismatch: Mismatch) -> str:
    """One mismatch as plain text (the JUnit report's; the terminal's is rendered by the CLI)."""
    lines = [f"{mismatch.what}: {mismatch.message}" if mismatch.message else f"{mismatch.what} differ"]
    lines += [f"  - missing    {row}" for row in mismatch.missing]
    lines += [f"  + unexpected {row}" for row in mismatch.unexpected]
    return "\n".join(lines)
