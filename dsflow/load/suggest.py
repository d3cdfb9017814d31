"""'Did you mean ...?' hints."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    pool = list(candidates)
    lowered = {c.lower(): c for c in pool}
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    if match:
        return f"did you mean '{lowered[match[0]]}'?"
    if pool:
        shown = ", ".join(sorted(pool)[:8])
        return f"known: {shown}"
    return None
