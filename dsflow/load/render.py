"""Jinja2 rendering of project files before parsing, with StrictUndefined.

`var('x')` reads the selected environment's variables; `env_var('X', default)` reads the process
environment and marks the value as a secret, so it is redacted from state, plans and output.

A file whose only template syntax is `{{ var('name') }}` of variables that are set (the usual store file:
`bootstrap_servers: "{{ var('bootstrap') }}"`) is rendered without Jinja, as Jinja renders it: each lookup
becomes `str(value)` and the rest of the text is unchanged. jinja2 (~25 ms to import) is imported for anything
else.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
        return value


def render(text: str, path: str, context: RenderContext) -> tuple[str | None, list[Diagnostic]]:
    """Render one file; on failure return None and a diagnostic with the template line."""
    if not _is_template(text):
        return text, []
    looked_up = _render_var_lookups(text, context.variables)
    if looked_up is not None:
        return looked_up, []
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.globals.update(var=context.var, env_var=context.env_var)
    try:
        return env.from_string(text).render(), []
    except jinja2.TemplateSyntaxError as err:
        return None, [Diagnostic("DSF-E003", f"template syntax error: {err.message}", Location(path, err.lineno or 0),
                                 hint="check the {{ }} and {% %} blocks")]
    except _UnsetEnvVar as err:
        return None, [Diagnostic("DSF-E004", f"template error: {err}", Location(path, _template_line(err)),
                                 hint="export it before running dsflow, or give env_var a default")]
    except (jinja2.UndefinedError, jinja2.TemplateError) as err:
        return None, [Diagnostic("DSF-E004", f"template error: {err}", Location(path, _template_line(err)),
                                 hint="define it under environments.<env>.vars in dsflow.yml or pass --var")]


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
