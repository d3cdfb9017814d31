"""Diagnostics and the exception tree.

    DsflowError                 an error with a stable code, shown without a traceback
    └── ProjectError            loading failed: carries every Diagnostic found, not only the first

A Diagnostic names where (file:line:col), what (a stable code such as DSF-E031 and a message)
and how to fix it (a hint). Stages collect diagnostics and the loader raises once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum

from dsflow.core.secrets import scrub


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, order=True)
class Location:
    """A place in a project file; line and column are 1-based, 0 when unknown."""

    file: str
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        if not self.line:
            return self.file
        return f"{self.file}:{self.line}:{self.col}" if self.col else f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in a project, with where, what and how to fix it."""

    code: str
    message: str
    location: Location | None = None
    hint: str | None = None
    severity: Severity = Severity.ERROR
    subject: str | None = None
    """For an error that only says an object is unknown: that object (store.k, schema.db.s, relation.db.s.n, or a
    name as written); the loader folds it under the error that made the object's declaration fail
    (load/consequences.py). Not shown."""

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        text = f"{where}{self.severity.value} {self.code}: {self.message}"
        return scrub(f"{text}\n  hint: {self.hint}" if self.hint else text)  # no secret value in any message

    def to_dict(self) -> dict:
        loc = self.location
        return {
            "code": self.code,
            "severity": self.severity.value,
            "message": scrub(self.message),
            "file": loc.file if loc else None,
            "line": loc.line if loc else None,
            "col": loc.col if loc else None,
            "hint": scrub(self.hint) if self.hint else self.hint,
        }


class DsflowError(Exception):
    """An error meant for the user: a stable code, a message and maybe a hint."""

    def __init__(self, code: str, message: str, hint: str | None = None, location: Location | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.location = location

    def diagnostic(self) -> Diagnostic:
        return Diagnostic(self.code, self.message, self.location, self.hint)

    def __str__(self) -> str:
        return str(self.diagnostic())


@dataclass
class ProjectError(DsflowError):
    """Loading or validating a project failed; `diagnostics` holds every problem found."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    def __post_init__(self) -> None:
        first = self.diagnostics[0] if self.diagnostics else Diagnostic("DSF-E000", "invalid project")
        DsflowError.__init__(self, first.code, f"{len(self.errors)} error(s) in project")

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.ERROR]

    def __str__(self) -> str:
        return "\n".join(str(d) for d in self.diagnostics)


@contextmanager
def unchained(wrap: Callable[[Exception], DsflowError]) -> Iterator[None]:
    """Errors leave the block scrubbed (core/secrets.py) and without their chain.

    Spark prints a failed data source's traceback whole into the driver's log and the query's error, and an SDK
    error chained under a DsflowError (a broker client's, an HTTP SDK's) carries its own text: a broker address or an
    endpoint that may be a secret, in clear. A DsflowError loses its cause; any other error becomes `wrap(err)`,
    whose message (scrubbed like every DsflowError's) carries the SDK's text.
    """
    try:
        yield
    except DsflowError as err:
        raise err from None
    except Exception as err:  # noqa: BLE001 - any SDK error: its text, scrubbed, without its traceback chain
        raise wrap(err) from None
