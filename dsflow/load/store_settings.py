"""A store kind's settings model: the `settings` rule of its `rules` facet (load/rules.py).

Each store kind that checks its `properties` declares them as one pydantic model in its own folder
(`adapters/<store>/settings.py`): every property it takes is a field, a required one has no default, and any other
is DSF-E095 at the property's own line. Values arrive as the text YAML and Jinja made them; a field typed
otherwise (a port) is parsed, and a value that does not parse is DSF-E095 too. A kind without a model (one whose
properties are its client library's settings, passed through) is not checked here.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, ValidationError

from dsflow.errors import Diagnostic, Location
from dsflow.core.suggest import did_you_mean

Where = Callable[[str], Location | None]
HINT = "see docs/project.md (Table stores)"


class StoreSettings(BaseModel):
    """The properties of a store of one kind (extra ones are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class AwsCredentials(StoreSettings):
    """An AWS region and credentials (else the AWS default chain: environment, profile, instance role); secrets
    through env_var(). Shared by the stores on AWS services."""

    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None


def keys(model: type[StoreSettings]) -> tuple[set[str], set[str]]:
    """(required, allowed) property names of a settings model, as written in a project (aliases)."""
    names = {name: field.alias or name for name, field in model.model_fields.items()}
    required = {names[n] for n, field in model.model_fields.items() if field.is_required()}
    return required, set(names.values())


def settings_diagnostics(model: type[StoreSettings], name: str, type_: str, properties: dict[str, str],
                         location: Location | None, where: Where) -> list[Diagnostic]:
    """DSF-E095 for each property the model refuses: an unknown one (with a guess), a missing one, a bad value."""
    try:
        model.model_validate(properties)
        return []
    except ValidationError as err:
        problems = err.errors(include_url=False)
    _, allowed = keys(model)
    unknown = sorted(str(p["loc"][0]) for p in problems if p["type"] == "extra_forbidden")
    missing = sorted(str(p["loc"][0]) for p in problems if p["type"] == "missing")
    out = [Diagnostic("DSF-E095", f"unknown property '{key}' of the {type_} store '{name}'",
                      where(key) or location,
                      hint=did_you_mean(key, allowed) or f"allowed: {', '.join(sorted(allowed))}")
           for key in unknown]
    out += [Diagnostic("DSF-E095", f"the {type_} store '{name}' needs the property '{key}'", location, hint=HINT)
            for key in missing]
    for problem in problems:
        if problem["type"] in ("extra_forbidden", "missing"):
            continue
        key = str(problem["loc"][0])
        out.append(Diagnostic("DSF-E095", f"property '{key}' of the {type_} store '{name}' is "
                              f"{properties.get(key)!r}: {_lower_first(problem['msg'])}",
                              where(key) or location, hint=HINT))
    return out


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]
