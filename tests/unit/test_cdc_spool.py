"""The CDC reader's spool (adapters/postgres/datasource.py): a batch's LSN range (low, high] is read from spool
files that must chain from low to high; a missing file fails the batch (DSF-E709) instead of committing LSNs
whose change events were never read. Real files in a temporary folder; no database is needed for this rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsflow.adapters.postgres.changes import Event
from dsflow.adapters.postgres.datasource import CdcRange, read_events
from dsflow.errors import DsflowError


def _spool(path: Path, low: int, high: int, lsns: list[int]) -> None:
    lines = [Event(lsn, 1_700_000_000_000, str(lsn), f'{{"lsn": {lsn}}}').line() for lsn in lsns]
    (path / f"{low:016x}_{high:016x}.jsonl").write_text("".join(lines))


def _keys(spool: Path, low: int, high: int) -> list[str]:
    task = CdcRange(str(spool), {"lsn": low, "snapshot": 1}, {"lsn": high, "snapshot": 1})
    return [k for batch in read_events(task) for k in batch.column(0).to_pylist()]


def test_a_batch_reads_every_event_of_its_lsn_range(tmp_path: Path) -> None:
    _spool(tmp_path, 100, 200, [120, 150, 200])
    _spool(tmp_path, 200, 300, [250, 300])
    assert _keys(tmp_path, 100, 300) == ["120", "150", "200", "250", "300"]
    assert _keys(tmp_path, 200, 300) == ["250", "300"]


def test_a_missing_spool_file_fails_the_batch(tmp_path: Path) -> None:
    _spool(tmp_path, 100, 200, [120, 150, 200])
    _spool(tmp_path, 250, 300, [260])  # the events of (200, 250] are gone
    with pytest.raises(DsflowError) as failed:
        _keys(tmp_path, 100, 300)
    assert failed.value.code == "DSF-E709" and "C8-FA" in str(failed.value)
    with pytest.raises(DsflowError):
        _keys(tmp_path, 300, 400)  # nothing spooled at all for a range that has LSNs
