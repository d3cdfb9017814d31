"""The state backend protocol, the lock holder record, and the checks every backend shares.

A backend reads and writes one environment's State and holds one lock for it:

- `write` never leaves a half-written state behind (atomic rename, a conditional object put, or a
  transaction), and with `expected_serial` it is a compare-and-swap: it refuses (DSF-E804) when the
  stored state moved on since the writer read it.
- `lock` fails fast (DSF-E802) naming the holder; `force_unlock` removes a lock only by its id (DSF-E803).
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

from dsflow.core.state import State
from dsflow.errors import DsflowError


@dataclass(frozen=True)
class LockInfo:
    """Who holds the state lock."""

    id: str
    who: str
    operation: str
    created: float
    pid: int

    @classmethod
    def new(cls, operation: str) -> LockInfo:
        return cls(id=str(uuid.uuid4()), who=f"{getpass.getuser()}@{socket.gethostname()}",
                   operation=operation, created=time.time(), pid=os.getpid())

    @classmethod
    def from_json(cls, text: str | bytes) -> LockInfo | None:
        """The holder recorded in `text`, or None if it is not a lock record."""
        try:
            return cls(**json.loads(text))
        except (ValueError, TypeError):
            return None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.created))
        return f"lock {self.id} held by {self.who} (pid {self.pid}) for '{self.operation}' since {when}"


@runtime_checkable
class StateBackend(Protocol):
    """Reads, writes and locks the deployed state of one project environment."""

    def read(self) -> State:
        """The stored state, or an empty State for this environment if none was written yet."""

    def write(self, state: State, *, expected_serial: int | None = None) -> None:
        """Store `state` whole. With `expected_serial` (the serial the writer read), refuse with
        DSF-E804 if the stored serial is another one or the stored lineage differs from the state's."""

    def lock(self, operation: str) -> AbstractContextManager[LockInfo]:
        """Hold the state lock for `operation`; raise DSF-E802 at once, naming the holder, if it is held."""

    def lock_holder(self) -> LockInfo | None:
        """Who holds the lock now, or None."""

    def force_unlock(self, lock_id: str) -> None:
        """Remove the lock if `lock_id` is its holder's id; DSF-E803 otherwise."""


def locked_error(holder: LockInfo | None, where: str) -> DsflowError:
    """DSF-E802: the lock is taken; names who holds it and how to remove a stale lock."""
    detail = holder.describe() if holder else f"a holder that recorded no details ({where})"
    lock_id = holder.id if holder else "LOCK_ID"
    return DsflowError("DSF-E802", f"state is locked: {detail}",
                       hint=f"wait for it to finish, or if its process is gone run 'dsflow force-unlock {lock_id}'")


def check_unlock(holder: LockInfo | None, lock_id: str) -> LockInfo:
    """DSF-E803 unless `lock_id` names the current holder."""
    if holder is None:
        raise DsflowError("DSF-E803", "state is not locked")
    if holder.id != lock_id:
        raise DsflowError("DSF-E803", f"lock id {lock_id} does not match the holder's {holder.id}",
                          hint=f"the lock is {holder.describe()}")
    return holder


def check_current(stored: tuple[int, str] | None, state: State, expected_serial: int | None, where: str) -> None:
    """The compare step of a compare-and-swap: refuse (DSF-E804) a write based on a state that moved on.

    `stored` is the (serial, lineage) found in the backend, None when nothing is stored (serial 0).
    """
    if expected_serial is None:
        return
    serial, lineage = stored if stored is not None else (0, "")
    if serial != expected_serial:
        raise stale_error(where, f"it was read at serial {expected_serial} but is now at serial {serial}")
    if lineage and state.lineage and lineage != state.lineage:
        raise stale_error(where, f"the stored state has lineage {lineage}, this one has {state.lineage}")


def stale_error(where: str, detail: str) -> DsflowError:
    """DSF-E804: another process wrote the state since it was read."""
    return DsflowError("DSF-E804", f"state {where} changed since it was read: {detail}",
                       hint="another plan or apply wrote it; run 'dsflow plan' again")
