"""The one test hook in dsflow's code: failpoints, named by environment variables, that make a process stop dead
at a chosen moment so a test can kill it there (the worst moment to die) or let another process race it.

Unset, a failpoint costs one dictionary lookup and does nothing. Today there are two kinds:

- `DSFLOW_FAILPOINT_PAUSE_AFTER_NOTE=<address>`: `apply` pauses right after it has saved the intent of that
  resource's change (its PID, whether its topic existed) and before it acts on it
  (tests/e2e/test_interrupt.py, test_interrupt_backends.py, test_state_apply.py);
  with `DSFLOW_FAILPOINT_RESUME_FILE=<path>` it goes on once that file exists, otherwise it waits for its kill.
- `DSFLOW_FAILPOINT_PAUSE_AT=<point>`: the process pauses for its kill when it reaches the named point; today
  `blue_green.micro_batches` (engine/bluegreen.py: a deployed version of real-time mode restarted in
  micro-batches and recorded, nothing built yet; tests/e2e/test_realtime_switch.py), `blue_green.caught_up` (the new
  version caught up, the deployed one not stopped yet),
  `blue_green.compared` (the deployed version stopped at the cut, both logs compared, no reader moved yet),
  `blue_green.switching` (the switch noted, nothing in it moved: a table's transaction of renames not begun),
  `blue_green.switched_one` (the first reader started on the new log and noted, the others not moved yet) and
  `blue_green.resumed` (the switch done: a table renamed, readers moved; the new version started again writing
  the production relation, and the state not written yet; these five: tests/e2e/test_bluegreen.py); with
  `DSFLOW_FAILPOINT_REACHED_FILE=<path>` it creates that file as it pauses.
"""

from __future__ import annotations

import os
import time

PAUSE_AFTER_NOTE = "DSFLOW_FAILPOINT_PAUSE_AFTER_NOTE"
"""Set to a resource address to make apply stop dead right after noting intent for it."""
RESUME_FILE = "DSFLOW_FAILPOINT_RESUME_FILE"
"""With PAUSE_AFTER_NOTE: the paused apply goes on once this file exists."""
LONGEST_PAUSE_S = 3600


def pause_after_note(address: str) -> None:
    """Pause here when PAUSE_AFTER_NOTE names `address`: until RESUME_FILE exists, or (none given) for the kill."""
    if os.environ.get(PAUSE_AFTER_NOTE) != address:
        return
    resume = os.environ.get(RESUME_FILE)
    deadline = time.monotonic() + LONGEST_PAUSE_S
    while time.monotonic() < deadline and not (resume and os.path.exists(resume)):
        time.sleep(0.05 if resume else 60)


PAUSE_AT = "DSFLOW_FAILPOINT_PAUSE_AT"
"""Set to a point's name to make the process stop dead there, until its kill."""
REACHED_FILE = "DSFLOW_FAILPOINT_REACHED_FILE"
"""With PAUSE_AT: the file the process creates once it pauses there (a test kills it then, not before)."""


def pause_at(point: str) -> None:
    """Pause here, until the process is killed, when PAUSE_AT names `point`."""
    if os.environ.get(PAUSE_AT) != point:
        return
    reached = os.environ.get(REACHED_FILE)
    if reached:
        with open(reached, "w", encoding="utf-8") as marker:
            marker.write(point)
    deadline = time.monotonic() + LONGEST_PAUSE_S
    while time.monotonic() < deadline:
        time.sleep(1)
