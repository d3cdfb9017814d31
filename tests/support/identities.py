"""The processes a test's project runs, found as dsflow finds them: by their identity (adapters/process.py)."""

from __future__ import annotations

from pathlib import Path

from dsflow.adapters import process


def running(root: Path, role: str) -> list[int]:
    """The PIDs of the live processes holding an identity of `role` ('driver', 'host', 'datagen', 'standby', ...)
    anywhere under `root`."""
    found = []
    for record in sorted(root.rglob(f"{role}.process.json")):
        pid = process.holder(process.Identity(record.parent, role))
        if pid is not None:
            found.append(pid)
    return found
