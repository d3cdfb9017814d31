"""The state backend protocol, the lock holder record, and the checks every backend shares.

A backend reads and writes one environment's State and holds one lock for it:

- `write` never leaves a half-written state behind (atomic rename, a conditional object put, or a
  transaction), and with `expected_serial` it is a compare-and-swap: it refuses (DSF-E804) when the
  stored state moved on since the writer read it.
- `lock` fails fast (DSF-E802) naming the holder (host, PID, command, time) and saying when that process is
  gone from this host; `force_unlock` removes a lock only by its id (DSF-E803).
- `read` tells a missing state (an empty State without lineage) from a stored one (always with a lineage);
  a stored document without a lineage (`{}`) is refused (DSF-E910), never taken as empty.
- `redaction_key` is the random key of the markers that stand for secret values (core/secrets.py), kept
  beside the state and never in it: created once, by whichever command needs it first.
- `append_events` adds to the environment's event log (core/events.py) without reading or rewriting the state or
  earlier events; `read_events` returns the log oldest first, from just after `since` when given.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import sys
import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, fields
from typing import Protocol, runtime_checkable

from dsflow.core.events import Event
from dsflow.core.state import State
from dsflow.errors import DsflowError


@dataclass(frozen=True)
class LockInfo:
    """Who holds the state lock: which process on which host, running what, since when."""

    id: str
    who: str
    operation: str
    created: float
    pid: int
    host: str = ""
    command: str = ""

    @classmethod
    def new(cls, operation: str) -> LockInfo:
        host = socket.gethostname()
        return cls(id=str(uuid.uuid4()), who=f"{getpass.getuser()}@{host}", operation=operation,
                   created=time.time(), pid=os.getpid(), host=host, command=_command())

    @classmethod
    def from_json(cls, text: str | bytes) -> LockInfo | None:
        """The holder recorded in `text` (one written by older dsflow too), or None if it is not a lock record."""
        try:
            found = json.loads(text)
            known = {f.name for f in fields(cls)}
            return cls(**{k: v for k, v in found.items() if k in known})
        except (ValueError, TypeError, AttributeError):
            return None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @property
    def host_name(self) -> str:
        """The holder's host (older records name it only in `who`, as user@host)."""
        return self.host or self.who.rpartition("@")[2]

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.created))
        command = f" running '{self.command}'" if self.command else ""
        return f"lock {self.id} held by {self.who} (pid {self.pid}{command}) for '{self.operation}' since {when}"

    def gone(self) -> bool:
        """True if the holder ran on this host and its process is no longer there (or its PID is another
        process's now, started after the lock was taken)."""
        if not self.pid or self.host_name != socket.gethostname():
            return False
        import psutil

        try:
            proc = psutil.Process(self.pid)
            return proc.status() == psutil.STATUS_ZOMBIE or proc.create_time() > self.created + 1
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            return False


def _command() -> str:
    """This process's command as a user typed it (`dsflow apply --auto-approve`), cut to 200 characters;
    secret values never appear in dsflow's arguments, and are scrubbed if they do."""
    from dsflow.core.secrets import scrub

    args = [os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python", *sys.argv[1:]]
    return scrub(" ".join(args))[:200]


@runtime_checkable
class StateBackend(Protocol):
    """Reads, writes and locks the deployed state of one project environment."""

    def read(self) -> State:
        """The stored state, or an empty State for this environment (no lineage) if none was written yet; a stored
        document without a lineage is refused (DSF-E910)."""

    def peek(self) -> State:
        """The stored state as `read` gives it, made or changed nothing to read it (no table, no lock)."""

    def write(self, state: State, *, expected_serial: int | None = None) -> None:
        """Store `state` whole. With `expected_serial` (the serial the writer read), refuse with
        DSF-E804 if the stored serial is another one or the stored lineage differs from the state's."""

    def lock(self, operation: str) -> AbstractContextManager[LockInfo]:
        """Hold the state lock for `operation`; raise DSF-E802 at once, naming the holder, if it is held."""

    def lock_holder(self) -> LockInfo | None:
        """Who holds the lock now, or None."""

    def force_unlock(self, lock_id: str) -> None:
        """Remove the lock if `lock_id` is its holder's id; DSF-E803 otherwise."""

    def redaction_key(self) -> bytes:
        """The key of this environment's secret markers, made (once, atomically) if there is none yet."""

    def append_events(self, events: list[Event]) -> None:
        """Add `events` to the environment's event log (append only: nothing stored is read or rewritten)."""

    def read_events(self, since: str | None = None) -> list[Event]:
        """The event log, oldest first; with `since` (the log's time text) only events after it."""


def locked_error(holder: LockInfo | None, where: str) -> DsflowError:
    """DSF-E802: the lock is taken; names who holds it, says when its process is gone from this host, and how to
    remove a stale lock."""
    if holder is None:
        return DsflowError("DSF-E802", f"state is locked by a holder that recorded no details ({where})",
                           hint="wait for it to finish; run the command again to see the holder once it has "
                                "recorded itself")
    if holder.gone():
        return DsflowError("DSF-E802", f"state is locked: {holder.describe()}; that process (pid {holder.pid}) is "
                           f"no longer running on this host, so the lock is stale",
                           hint=f"release it with 'dsflow force-unlock {holder.id}', then run the command again")
    return DsflowError("DSF-E802", f"state is locked: {holder.describe()}",
                       hint=f"wait for it to finish, or if its process is gone run 'dsflow force-unlock {holder.id}'")


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


def check_lineage(state: State, where: str) -> State:
    """A stored state always has a lineage (apply sets it before the first write): refuse one without (DSF-E910),
    such as `{}`, which would otherwise read as an empty state and make every deployed object unknown."""
    if not state.lineage:
        raise no_lineage_error(where)
    return state


def no_lineage_error(where: str) -> DsflowError:
    """DSF-E910: a stored state without a lineage."""
    return DsflowError("DSF-E910", f"state {where} has no lineage: it is not a state dsflow wrote, or it was "
                       "emptied; it is not taken as empty",
                       hint="restore the state (<env>.json.backup, an earlier object version or a database "
                            "backup); remove it only if nothing was deployed")


def check_writable(state: State, where: str) -> None:
    """Only a state with a lineage is stored (DSF-E911): anything else would be refused on the next read."""
    if not state.lineage:
        raise DsflowError("DSF-E911", f"refusing to write a state without a lineage to {where}",
                          hint="this is a bug in the caller: states get their lineage with State.with_lineage()")


REDACTION_KEY_BYTES = 32


def new_redaction_key() -> str:
    """A fresh random key, as the hex text the backends store."""
    return os.urandom(REDACTION_KEY_BYTES).hex()


def parse_redaction_key(text: str | bytes, where: str) -> bytes:
    """The stored key (64 hex characters) as bytes; DSF-E912 if it is not one."""
    try:
        key = bytes.fromhex(text.decode() if isinstance(text, bytes) else text)
    except (ValueError, UnicodeDecodeError):
        key = b""
    if len(key) != REDACTION_KEY_BYTES:
        raise DsflowError("DSF-E912", f"the redaction key {where} is not {REDACTION_KEY_BYTES * 2} hex characters",
                          hint="restore it; if it is lost, remove it: a new key is made, and the next plan shows "
                               "every object holding a secret as changed (in place)")
    return key


def stale_error(where: str, detail: str) -> DsflowError:
    """DSF-E804: another process wrote the state since it was read."""
    return DsflowError("DSF-E804", f"state {where} changed since it was read: {detail}",
                       hint="another plan or apply wrote it; run 'dsflow plan' again")
