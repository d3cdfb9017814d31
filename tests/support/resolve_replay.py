"""Every SELECT resolved twice, with sql/simple.py's one-walk qualify and with sqlglot's qualify alone, and the two
results compared: the resolved query (its SQL, sources, columns and types, shape), every diagnostic (code, message,
file:line:col, hint) and the tree left behind. The proof that the one walk changes no output, over what the tests
load (docs/benchmarks.md, "Plan time, 2026-11-30 (fifth pass)"):

    DSFLOW_CACHE=0 DSFLOW_LOAD_WORKERS=1 python -m pytest -n 0 -p tests.support.resolve_replay tests/unit -q

prints a summary at the end and fails the session on any difference. `install()` does the same for a script;
tests/unit/test_simple_qualify.py runs it over the example projects and a generated benchmark project in every run.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

from dsflow.sql import select as select_module
from dsflow.sql import simple
from dsflow.sql.parse import DIALECT

COUNTS: Counter[str] = Counter()
DIFFERENCES: list[str] = []
_replaying = False


def install() -> Callable[[], None]:
    """Wrap analyse_select (and count what qualify_simple takes); returns what undoes it."""
    original, one_walk = select_module.analyse_select, simple.qualify_simple

    def counted(select, columns) -> bool:
        taken = one_walk(select, columns)
        COUNTS["one walk" if taken else "refused by the one walk"] += 1
        return taken

    def both(path, st, relations, qualify_name, report, copy=True):
        global _replaying
        if _replaying:  # a UNION's branch, a subquery: compared as part of the statement around it
            return original(path, st, relations, qualify_name, report, copy)
        tree = st.select.tree() if hasattr(st.select, "tree") else st.select
        slow_st = dataclasses.replace(st, select=tree.copy() if tree is not None else None)
        slow_found, fast_found = [], []
        _replaying, select_module.QUALIFY_SIMPLE = True, False
        try:
            slow = _outcome(original, path, slow_st, relations, qualify_name, slow_found.append, copy)
            select_module.QUALIFY_SIMPLE = True
            fast = _outcome(original, path, st, relations, qualify_name, fast_found.append, copy)
        finally:
            _replaying, select_module.QUALIFY_SIMPLE = False, True
        COUNTS["statements"] += 1
        _compare(path, st, (slow, slow_found, _sql(slow_st)), (fast, fast_found, _sql(st)))
        for diagnostic in fast_found:
            report(diagnostic)
        if isinstance(fast, BaseException):
            raise fast
        return fast

    select_module.analyse_select = both
    simple.qualify_simple = counted
    select_module.qualify_simple = counted

    def undo() -> None:
        select_module.analyse_select = original
        simple.qualify_simple = select_module.qualify_simple = one_walk

    return undo


def _outcome(function, *args):
    try:
        return function(*args)
    except Exception as err:  # noqa: BLE001 (compared, then raised again)
        return err


def _sql(st) -> str | None:
    tree = st.select.tree() if hasattr(st.select, "tree") else st.select
    return tree.sql(dialect=DIALECT) if tree is not None else None


def _compare(path: str, st, slow: tuple, fast: tuple) -> None:
    def shown(value):
        return repr(value) if isinstance(value, BaseException) else value

    names = ("result", "diagnostics", "tree left")
    for name, a, b in zip(names, (shown(slow[0]), slow[1], slow[2]), (shown(fast[0]), fast[1], fast[2]), strict=True):
        if a != b:
            DIFFERENCES.append(f"{path}:{st.location}: {name} differs\n  qualify: {a!r}\n  one walk: {b!r}")


def pytest_configure(config) -> None:
    install()


def pytest_terminal_summary(terminalreporter) -> None:
    terminalreporter.write_line(f"resolve replay: {dict(COUNTS)}; {len(DIFFERENCES)} difference(s)")
    for line in DIFFERENCES[:20]:
        terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus) -> None:
    if DIFFERENCES:
        session.exitstatus = 1
