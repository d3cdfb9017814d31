"""Jinja2 rendering of project files before parsing, with StrictUndefined.

`var('x')` reads the selected environment's variables; `env_var('X', default)` reads the process
environment and marks the value as a secret, so it is redacted from state, plans and output.

A file whose only template syntax is `{{ var('name') }}` of variables that are set (the usual store file:
`bootstrap_servers: "{{ var('bootstrap') }}"`) is rendered without Jinja, as Jinja renders it: each lookup
becomes `str(value)` and the rest of the text is unchanged. jinja2 (~25 ms to import) is imported for anything
else.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dsflow.core.secrets import register
from dsflow.errors import Diagnostic, Location

_MISSING = object()
_VAR_LOOKUP = re.compile(r"""\{\{\s*var\(\s*(?:'([^'\\{}]*)'|"([^"\\{}]*)")\s*\)\s*\}\}""")
"""`{{ var('name') }}` or `{{ var("name") }}`: a name without quotes, backslashes or braces."""


class _UnsetEnvVar(Exception):
    """env_var('X') without a default, and X is not in the environment (raised through Jinja's render)."""


@dataclass
class RenderContext:
    """Variables for one environment, plus the secrets seen while rendering."""

    variables: Mapping[str, Any]
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    secrets: set[str] = field(default_factory=set)

    def var(self, name: str, default: Any = _MISSING) -> Any:
        if name in self.variables:
            return self.variables[name]
        if default is _MISSING:
            import jinja2  # called from a template: Jinja is imported

            raise jinja2.UndefinedError(f"variable '{name}' is not set for this environment")
        return default

    def env_var(self, name: str, default: Any = _MISSING) -> str:
        if name in self.environ:
            value = self.environ[name]
        elif default is _MISSING:
            raise _UnsetEnvVar(f"environment variable '{name}' is not set")
        else:
            value = str(default)
        if value:
            self.secrets.add(value)
            if name in self.environ:  # a default is written in the project files: nothing to hide in messages
                register([value])  # hidden from every message and log line of this process (core/secrets.py)
        return value


def render(text: str, path: str, context: RenderContext) -> tuple[str | None, list[Diagnostic]]:
    """Render one file; on failure return None and a diagnostic with the template line. Any exception the template
    raises is the file's error (DSF-E004), never a traceback: `{{ 1/0 }}`, `var()` without a name, ..."""
    if not _is_template(text):
        return text, []
    looked_up = _render_var_lookups(text, context.variables)
    if looked_up is not None:
        return looked_up, []
    import jinja2

    if _template_nesting(text) > MAX_TEMPLATE_NESTING:
        return None, [_too_deep(path)]
    env = _environment()
    env.globals.update(var=_template_function("var", context.var),
                       env_var=_template_function("env_var", context.env_var))
    try:
        return env.from_string(text).render(), []
    except jinja2.TemplateSyntaxError as err:
        return None, [Diagnostic("DSF-E003", f"template syntax error: {err.message}", Location(path, err.lineno or 0),
                                 hint="check the {{ }} and {% %} blocks")]
    except _UnsetEnvVar as err:
        return None, [Diagnostic("DSF-E004", f"template error: {err}", Location(path, _template_line(err)),
                                 hint="export it before running dsflow, or give env_var a default")]
    except jinja2.TemplateNotFound as err:
        return None, [Diagnostic("DSF-E201", f"template error: {{% include %}}, {{% extends %}} and {{% import %}} are "
                                 f"not supported (it names '{err.name}')", Location(path, _template_line(err)),
                                 hint="each file is rendered on its own: define a macro in this file instead")]
    except RecursionError:
        return None, [_too_deep(path)]
    except jinja2.UndefinedError as err:
        return None, [Diagnostic("DSF-E004", f"template error: {err}", Location(path, _template_line(err)),
                                 hint="define it under environments.<env>.vars in dsflow.yml or pass --var")]
    except jinja2.TemplateError as err:
        return None, [Diagnostic("DSF-E004", f"template error: {err}", Location(path, _template_line(err)),
                                 hint="fix the expression on that line")]
    except Exception as err:  # noqa: BLE001 - the template's own code failed ({{ 1/0 }}): the user's error
        return None, [Diagnostic("DSF-E004", f"template error: {type(err).__name__}: {err}",
                                 Location(path, _template_line(err)), hint="fix the expression on that line")]


MAX_TEMPLATE_VALUE = 10_000_000
"""The largest string or list a template's `*` may make, and (in bits) the largest `**` result: what a project
file needs is far smaller, and `{{ 'x' * 10**12 }}` or `{{ 9**9**9 }}` would exhaust memory or never end."""


@functools.cache
def _environment_class() -> type:
    """Jinja's sandbox (no attribute access to Python internals, range() bounded) with `*` and `**` bounded."""
    import math

    from jinja2.sandbox import SandboxedEnvironment, SecurityError

    class ProjectEnvironment(SandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and _is_int(left) and _is_int(right) and abs(left) > 1 \
                    and right * math.log2(abs(left)) > MAX_TEMPLATE_VALUE:
                raise SecurityError(f"{left} ** {right} is too large")
            if operator == "*" and (_too_long(left, right) or _too_long(right, left)):
                raise SecurityError(f"a repeated value longer than {MAX_TEMPLATE_VALUE:,} would be made")
            return super().call_binop(context, operator, left, right)

    return ProjectEnvironment


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _too_long(sequence: Any, times: Any) -> bool:
    return isinstance(sequence, (str, list, tuple)) and _is_int(times) and len(sequence) * times > MAX_TEMPLATE_VALUE


def _environment() -> Any:
    """A fresh Jinja environment for one file: strict undefined, no autoescape, and a loader that finds nothing
    (so `{% include %}` fails as TemplateNotFound)."""
    import jinja2

    env = _environment_class()(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
                               loader=jinja2.FunctionLoader(lambda name: None))
    env.globals.pop("lipsum", None)  # lipsum(10**6) would write paragraphs for minutes; no project needs it
    return env


def _template_function(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """`var` or `env_var` as templates call it: a name (text) and an optional default, else a clear error."""
    def call(*args: Any, **kwargs: Any) -> Any:
        given = dict(zip(("name", "default"), args, strict=False)) | kwargs
        if len(args) > 2 or set(given) - {"name", "default"} or len(given) != len(args) + len(kwargs) \
                or not isinstance(given.get("name"), str):
            import jinja2

            raise jinja2.TemplateRuntimeError(f"{name}() takes a name in quotes and an optional default: "
                                              f"{name}('NAME') or {name}('NAME', 'default')")
        return function(**given)

    call.__name__ = name
    return call


def _is_template(text: str) -> bool:
    """Whether Jinja could change the text: a block, expression or comment opens, or a \\r that Jinja's
    newline handling rewrites. Compiling a template costs ~1 ms per 10 KB; most SQL files have no tag."""
    return "{{" in text or "{%" in text or "{#" in text or "\r" in text


def _render_var_lookups(text: str, variables: Mapping[str, Any]) -> str | None:
    """What Jinja renders of `text` when its only template syntax is `{{ var('name') }}` with every name set:
    str() of each value (Jinja's output without autoescape), the rest unchanged. None when the text has anything
    else: a block or comment, another expression, a filter, `{{-`, `{{{`, a \\r, an unset name."""
    if "{%" in text or "{#" in text or "\r" in text or "{{{" in text:
        return None
    names = [_lookup_name(m) for m in _VAR_LOOKUP.finditer(text)]
    if len(names) != text.count("{{") or any(name not in variables for name in names):
        return None
    return _VAR_LOOKUP.sub(lambda m: str(variables[_lookup_name(m)]), text)


def _lookup_name(match: re.Match[str]) -> str:
    return match.group(1) if match.group(1) is not None else match.group(2)


def _template_line(err: BaseException) -> int:
    tb = err.__traceback__
    line = 0
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


MAX_TEMPLATE_NESTING = 100
"""Brackets nested deeper than this inside one {{ }} or {% %} block are DSF-E202, found before Jinja parses it
(Jinja's own RecursionError depends on the stack left, so it is only the fallback, for macros without end)."""
_BLOCK = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)


def _template_nesting(text: str) -> int:
    deepest = 0
    for block in _BLOCK.finditer(text):
        depth = 0
        for char in block.group(0):
            if char in "([":
                depth += 1
                deepest = max(deepest, depth)
            elif char in ")]":
                depth -= 1
    return deepest


def _too_deep(path: str) -> Diagnostic:
    return Diagnostic("DSF-E202", "the template is nested too deeply (or a macro calls itself without end)",
                      Location(path), hint="flatten the expression, or give the recursion an end")
