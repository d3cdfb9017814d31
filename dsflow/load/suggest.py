"""'Did you mean ...?' hints."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def relation_hint(name: str, relations: Iterable[str]) -> str | None:
    """The hint for an unknown relation `name` (its last part) among fully qualified `relations`: the same name in
    another database or schema first (`curated.pageviews`), else a close name."""
    qualified = list(relations)
    same = sorted(".".join(r.split(".")[-2:]) for r in qualified if r.rsplit(".", 1)[-1].lower() == name.lower())
    if same:
        return f"did you mean {' or '.join(repr(s) for s in same[:3])}? (the name exists in another schema)"
    return did_you_mean(name, [r.rsplit(".", 1)[-1] for r in qualified])


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
