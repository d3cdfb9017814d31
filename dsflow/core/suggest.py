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
        more = f" (and {len(same) - 3} more)" if len(same) > 3 else ""
        return f"did you mean {' or '.join(repr(s) for s in same[:3])}{more}? (the name exists in another schema)"
    return did_you_mean(name, [r.rsplit(".", 1)[-1] for r in qualified])


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to `name` (case ignored), if one is close enough."""
    lowered = {c.lower(): c for c in candidates}
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    pool = list(candidates)
    match = closest(name, pool)
    if match:
        return f"did you mean '{match}'?"
    if pool:
        return f"known: {shortened(sorted(pool))}"
    return None


SHOWN = 8
"""How many names a hint lists before it counts the rest."""


def shortened(names: list[str], limit: int = SHOWN) -> str:
    """The first `limit` names joined, and how many more there are: 'a, b, c and 4 more'."""
    shown = ", ".join(names[:limit])
    return f"{shown} and {len(names) - limit} more" if len(names) > limit else shown
