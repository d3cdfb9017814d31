"""What the supervisor notices in a running query besides its process: counted gaps and dead-letter bursts.

Each is an event of the environment's log (engine/eventlog.py), made when the supervisor sees more than at its last
look, which its record keeps (records.RuntimeRecord `gaps_seen`, `dead_letters_seen`):

    gap            new lines in the query's gaps.jsonl (offsets the broker holds no record for, counted under
                   'topic.gaps' = 'count'), with how many offsets they span
    dead_letters   records added to the query's dead-letter topic since the last look (asked of its store every
                   DEAD_LETTER_LOOK_SECONDS, as `dsflow status` counts them)
    expectation_failed
                   rows an expectation rule (CONSTRAINT ... EXPECT) counted failed since the last look, per rule,
                   from the driver's status file (its totals since the driver started)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsflow.runtime.records import RuntimeRecord

GAP_LOG = "gaps.jsonl"
STATUS_FILE = "status.json"
DEAD_LETTER_LOOK_SECONDS = 30.0
Emit = Callable[..., None]


def new_gaps(run_dir: Path, record: RuntimeRecord, emit: Emit) -> bool:
    """Emit one 'gap' event for the gap log's lines the record has not seen; True if the record changed."""
    try:
        lines = [line for line in (run_dir / GAP_LOG).read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError:
        return False
    seen = record.gaps_seen if record.gaps_seen <= len(lines) else 0  # a new log (a new checkpoint)
    fresh, read = [], seen
    known = {_gap_key(line) for line in lines[:seen]}
    for line in lines[seen:]:
        try:
            gap = json.loads(line)
        except ValueError:
            break  # a line still being written: read on the next look
        read += 1
        if _gap_key(line) not in known:  # a replayed micro-batch logs its gaps again: one event each
            known.add(_gap_key(line))
            fresh.append(gap)
    if read == seen:
        return False
    record.gaps_seen = read
    if not fresh:
        return True
    offsets = sum(int(g.get("end", 0)) - int(g.get("start", 0)) for g in fresh if isinstance(g, dict))
    emit("gap", gaps=len(fresh), offsets=offsets, first=fresh[:10])
    return True


def _gap_key(line: str) -> tuple:
    """A gap's log, partition and offsets (what tells it apart), from its line; the line itself if it does not
    parse."""
    try:
        gap = json.loads(line)
    except ValueError:
        return (line,)
    return (gap.get("topic"), gap.get("partition"), gap.get("start"), gap.get("end")) if isinstance(gap, dict) \
        else (line,)


def dead_letter_burst(record: RuntimeRecord, count: Callable[[], dict[str, Any]], emit: Emit,
                      now: float | None = None) -> bool:
    """Emit a 'dead_letters' event when the query's dead-letter topic grew since the last look (at most one look per
    DEAD_LETTER_LOOK_SECONDS); True if the record changed."""
    now = time.time() if now is None else now
    if record.dead_letters_looked is not None and now - record.dead_letters_looked < DEAD_LETTER_LOOK_SECONDS:
        return False
    found = count()
    record.dead_letters_looked = now
    total = found.get("dead_letters")
    if not isinstance(total, int):
        return True
    before = record.dead_letters_seen or 0
    if total > before:
        emit("dead_letters", new=total - before, total=total, topic=found.get("dlq_topic"))
    record.dead_letters_seen = total
    return True


def failed_rows(run_dir: Path, record: RuntimeRecord, emit: Emit) -> bool:
    """Emit one 'expectation_failed' event per rule whose failed rows grew since the last look (a driver that
    started again counts from 0: all it counted is new); True if the record changed."""
    try:
        rules = json.loads((run_dir / STATUS_FILE).read_text(encoding="utf-8")).get("expectations") or {}
    except (OSError, ValueError, AttributeError):
        return False
    changed = False
    for rule, counts in sorted(rules.items()):
        failed = int(counts.get("failed") or 0) if isinstance(counts, dict) else 0
        before = record.failed_seen.get(rule, 0)
        new = failed - before if failed >= before else failed
        if new > 0:
            emit("expectation_failed", rule=rule, action=counts.get("action"), new=new, failed=failed,
                 passed=int(counts.get("passed") or 0))
        if failed != before:
            record.failed_seen[rule] = failed
            changed = True
    return changed
