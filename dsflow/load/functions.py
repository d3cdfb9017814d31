"""CREATE FUNCTION: user-defined Python scalar functions, resolved and checked against their code (DSF-E440..E442).

`AS 'module:function'` names a Python module of the project, found as Python finds it with the project root on
sys.path: 'udfs:count_char' is <root>/udfs.py (or <root>/udfs/__init__.py), 'lib.text:count_char' <root>/lib/text.py.
Validating imports it (the user's code, run as the project's own) and checks the function against the declaration:
that it exists, takes the declared parameters, and that its annotations, where it has them, agree with the SQL types.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import sys
import traceback
import types
import typing
from collections.abc import Callable, Iterable
from datetime import date, datetime
from pathlib import Path
from typing import Any

from dsflow.core.model import Column, Function
from dsflow.errors import Diagnostic, Location
from dsflow.sql.functions import Declared
from dsflow.sql.statements import RawStatement

Report = Callable[[Diagnostic], None]

PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "VARCHAR": (str,), "STRING": (str,), "BIGINT": (int,), "INT": (int,), "SMALLINT": (int,), "TINYINT": (int,),
    "DOUBLE": (float, int), "FLOAT": (float, int), "BOOLEAN": (bool,), "TIMESTAMP": (datetime,), "DATE": (date,),
}
"""The SQL types a function may take and return, and the Python types its annotations may give for each."""
TARGET = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*)$")
EXAMPLE = "CREATE FUNCTION count_char(s VARCHAR, c VARCHAR) RETURNS BIGINT LANGUAGE PYTHON AS 'udfs:count_char'"


def resolve_functions(statements: list[tuple[str, RawStatement]], root: Path, builtin: Callable[[str], bool],
                      report: Report) -> dict[str, Function]:
    """The project's functions by lower-case name; each problem reported at its CREATE FUNCTION."""
    found: dict[str, Function] = {}
    first: dict[str, Location] = {}
    for _, st in statements:
        if st.kind != "function":
            continue
        name = st.name[-1].lower()
        if name in first:
            report(Diagnostic("DSF-E440", f"function '{name}' is created twice", st.location,
                              hint=f"first created at {first[name]}: rename or remove one"))
            continue
        first[name] = st.location
        if builtin(name):
            report(Diagnostic("DSF-E440", f"function '{name}' has the name of a built-in function", st.location,
                              hint="give it another name: a built-in cannot be replaced"))
            continue
        function = _resolve(st, name, root, report)
        if function is not None:
            found[name] = function
    return found


def _resolve(st: RawStatement, name: str, root: Path, report: Report) -> Function | None:
    declared = _declaration(st, report)
    if declared is None:
        return None
    module, attribute = declared
    path = _module_path(root, module)
    target_at = st.extra.get("target_location") or st.location
    if path is None:
        report(Diagnostic("DSF-E441", f"function '{name}': module '{module}' is not in the project", target_at,
                          hint=f"create {module.replace('.', '/')}.py under the project root (the folder of "
                               "dsflow.yml); modules are found from the root as Python finds them on sys.path"))
        return None
    code = _load(root, path, module, name, target_at, report)
    if code is None:
        return None
    function = getattr(code, attribute, None)
    if not callable(function):
        what = "is not callable" if hasattr(code, attribute) else "is not defined"
        report(Diagnostic("DSF-E441", f"function '{name}': '{attribute}' {what} in module '{module}' "
                          f"({path.relative_to(root).as_posix()})", target_at,
                          hint=f"define `def {attribute}(...)` in the module, or name the right function after ':'"))
        return None
    if not _signature_agrees(st, name, function, report):
        return None
    return Function(name=name, parameters=tuple(Column(name=c.name, type=c.type) for c in st.columns),
                    returns=st.extra["returns"], module=module, function=attribute,
                    path=path.relative_to(root).as_posix(),
                    source_hash=hashlib.sha256(path.read_bytes()).hexdigest()[:16], location=st.location)


def _declaration(st: RawStatement, report: Report) -> tuple[str, str] | None:
    """(module, function) of a well-formed declaration, or None with each problem reported (DSF-E440)."""
    problems = []
    if st.extra.get("language") != "PYTHON":
        problems.append(("the function's language must be PYTHON (LANGUAGE PYTHON)", st.location))
    if not st.extra.get("returns"):
        problems.append(("the function declares no result type (RETURNS type)", st.location))
    target = TARGET.match(st.extra.get("target") or "")
    if target is None:
        problems.append((f"AS must name 'module:function', got '{st.extra.get('target') or ''}'",
                         st.extra.get("target_location") or st.location))
    if not st.columns:
        problems.append(("the function takes no parameter: Spark runs a function of at least one column",
                         st.location))
    types_ = [(c.type, c.location) for c in st.columns] + [(st.extra.get("returns") or "BIGINT", st.location)]
    problems += [(f"the type {t} is not supported for a function's parameters or result", where)
                 for t, where in types_ if t.upper() not in PYTHON_TYPES]
    for message, where in problems:
        report(Diagnostic("DSF-E440", f"CREATE FUNCTION {st.name[-1]}: {message}", where,
                          hint=f"e.g. {EXAMPLE}; types: {', '.join(PYTHON_TYPES)}"))
    return (target.group(1), target.group(2)) if target is not None and not problems else None


def _module_path(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _load(root: Path, path: Path, module: str, name: str, where: Location, report: Report) -> types.ModuleType | None:
    """The module run from its file, the project root on sys.path while it runs (it may import its neighbours);
    None with DSF-E441 if it raises."""
    spec = importlib.util.spec_from_file_location(module, path)
    assert spec is not None and spec.loader is not None  # a .py file
    code = importlib.util.module_from_spec(spec)
    added = str(root) not in sys.path
    if added:
        sys.path.insert(0, str(root))
    try:
        spec.loader.exec_module(code)
    except BaseException as err:  # noqa: BLE001  the user's code: SyntaxError, ImportError, SystemExit, ...
        if isinstance(err, KeyboardInterrupt):
            raise
        line = _line_in(err, path)
        report(Diagnostic("DSF-E441", f"function '{name}': importing module '{module}' failed: "
                          f"{type(err).__name__}: {err}", where,
                          hint=f"fix {path.relative_to(root).as_posix()}{f':{line}' if line else ''}; the module is "
                               "imported with the project root on sys.path"))
        return None
    finally:
        if added:
            sys.path.remove(str(root))
    return code


def _line_in(err: BaseException, path: Path) -> int | None:
    if isinstance(err, SyntaxError) and err.filename == str(path):
        return err.lineno
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == str(path)]
    return frames[-1].lineno if frames else None


def _signature_agrees(st: RawStatement, name: str, function: Any, report: Report) -> bool:
    """The function takes the declared parameters, and its annotations agree with their types (DSF-E442)."""
    declared = [c.name for c in st.columns]
    try:
        signature = inspect.signature(function)
        signature.bind(*declared)
    except TypeError:
        takes = _takes(function)
        report(Diagnostic("DSF-E442", f"function '{name}' is declared with {len(declared)} parameter(s) but "
                          f"{function.__name__}{takes} does not take {len(declared)} positional argument(s)",
                          st.location, hint=f"make the declaration's parameters match {function.__name__}{takes}"))
        return False
    except ValueError:  # a builtin without a signature: nothing to check
        return True
    hints = _hints(function)
    ok = True
    positional = [p for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for column, parameter in zip(st.columns, positional, strict=False):
        ok = _agrees(name, f"parameter '{parameter.name}'", hints.get(parameter.name), column.type, column.location,
                     report) and ok
    return _agrees(name, "result", hints.get("return"), st.extra["returns"], st.location, report) and ok


def _takes(function: Any) -> str:
    try:
        return str(inspect.signature(function))
    except (TypeError, ValueError):
        return "(...)"


def _hints(function: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(function)
    except Exception:  # noqa: BLE001  an annotation that does not evaluate: not checked
        return {}


def _agrees(name: str, what: str, hint: Any, sql_type: str, where: Location, report: Report) -> bool:
    if hint is None or hint is Any:
        return True
    wanted = PYTHON_TYPES[sql_type.upper()]
    given = [a for a in typing.get_args(hint) if a is not type(None)] if _is_union(hint) else [hint]
    if all(isinstance(g, type) and g in wanted for g in given):
        return True
    report(Diagnostic("DSF-E442", f"function '{name}': the {what} is annotated {_type_name(hint)} but declared "
                      f"{sql_type.upper()} in SQL", where,
                      hint=f"a {sql_type.upper()} is a Python {' or '.join(t.__name__ for t in wanted)}: change the "
                           "annotation or the declared type"))
    return False


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _type_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def signatures(functions: Iterable[Function]) -> dict[str, Declared]:
    """sql/functions.py's Declared of each Function, by name."""
    return {f.name: Declared(f.name, tuple(c.type for c in f.parameters), f.returns) for f in functions}


_STRING = re.compile(r"'(?:[^'\\]|\\.)*'")


def called_functions(select_sql: str, functions: dict[str, Function]) -> tuple[str, ...]:
    """The names of `functions` that the normalized SELECT calls, sorted (its string literals left out)."""
    if not functions:
        return ()
    code = _STRING.sub("''", select_sql)
    return tuple(sorted(n for n in functions if re.search(rf"(?<![\w.`\"]){re.escape(n)}\s*\(", code, re.I)))
