"""The local state backend: a JSON file per environment, a lock file holding who/when/what, the
environment's redaction key in a file of its own (mode 0600), and its event log as JSON lines (<env>.events.jsonl)."""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dsflow.adapters.state.base import (
    LockInfo,
    check_current,
    check_lineage,
    check_unlock,
    check_writable,
    locked_error,
    new_redaction_key,
    parse_redaction_key,
)
from dsflow.core.events import Event
from dsflow.core.model import StateSettings
from dsflow.core.state import State
from dsflow.errors import DsflowError

__all__ = ["LocalStateBackend", "LockInfo", "from_settings"]


class LocalStateBackend:
    """State at <dir>/<environment>.json, written atomically; lock at <environment>.lock.

    A write replaces the file by rename, after copying the previous one to <environment>.json.backup.
    A compare-and-swap write holds an flock on <environment>.json.wlock while it compares and renames.
    Files are first written under a temporary name (<environment>.tmp<pid>) and linked or renamed into place;
    a temporary file is removed on every exit path, and one left by a killed process is removed by the next write.
    """

    def __init__(self, directory: Path, environment: str):
        self.directory = directory
        self.environment = environment

    @property
    def path(self) -> Path:
        return self.directory / f"{self.environment}.json"

    @property
    def lock_path(self) -> Path:
        return self.directory / f"{self.environment}.lock"

    @property
    def key_path(self) -> Path:
        return self.directory / f"{self.environment}.key"

    def peek(self) -> State:
        """`read`: reading the file changes nothing."""
        return self.read()

    def read(self) -> State:
        if not self.path.exists():
            return State(environment=self.environment)
        try:
            state = State.model_validate_json(self.path.read_bytes())
        except (ValueError, OSError) as err:
            raise DsflowError("DSF-E801", f"state file {self.path} is unreadable: {err}",
                              hint="restore it from a backup (<env>.json.backup)") from err
        return check_lineage(state, str(self.path))

    def write(self, state: State, *, expected_serial: int | None = None) -> None:
        check_writable(state, str(self.path))
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".json.wlock"), "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            self._remove_orphans()
            if expected_serial is not None:
                stored = self.read() if self.path.exists() else None
                check_current((stored.serial, stored.lineage) if stored else None, state, expected_serial,
                              str(self.path))
            self._replace(state)

    def _replace(self, state: State) -> None:
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        backup_tmp = self.path.with_suffix(f".backup.tmp{os.getpid()}")
        try:
            _write_synced(tmp, state.model_dump_json(indent=2))
            if self.path.exists():
                shutil.copyfile(self.path, backup_tmp)
                os.replace(backup_tmp, self.path.with_suffix(".json.backup"))
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)
            backup_tmp.unlink(missing_ok=True)

    def _remove_orphans(self) -> None:
        """Temporary files of this environment left by a process that died mid-write (kill -9); called under
        the write flock, so no live writer's file is among them unless its PID is alive."""
        import psutil  # lazily, as in adapters/process.py

        for path in self.directory.glob(f"{self.environment}.*tmp*"):
            pid = path.name.rpartition("tmp")[2]
            if pid.isdigit() and not psutil.pid_exists(int(pid)):
                path.unlink(missing_ok=True)

    @property
    def events_path(self) -> Path:
        return self.directory / f"{self.environment}.events.jsonl"

    def append_events(self, events: list[Event]) -> None:
        """One write of whole lines under an flock on the log: appenders never interleave."""
        if not events:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        text = "".join(e.model_dump_json() + "\n" for e in events)
        with open(self.events_path, "a", encoding="utf-8") as log:
            fcntl.flock(log, fcntl.LOCK_EX)
            log.write(text)
            log.flush()
            os.fsync(log.fileno())

    def read_events(self, since: str | None = None) -> list[Event]:
        """The log's events; a line cut short by a killed writer is passed over."""
        try:
            lines = self.events_path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        found = []
        for line in lines:
            try:
                found.append(Event.model_validate_json(line))
            except ValueError:
                continue
        return sorted((e for e in found if since is None or e.time > since), key=lambda e: e.key)

    def redaction_key(self) -> bytes:
        if not self.key_path.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            self._create_exclusive(self.key_path, new_redaction_key())
        try:
            text = self.key_path.read_text()
        except OSError as err:
            raise DsflowError("DSF-E912", f"the redaction key {self.key_path} is unreadable: {err}",
                              hint="check its permissions (it is the owner's only, mode 0600)") from err
        return parse_redaction_key(text.strip(), str(self.key_path))

    def _create_exclusive(self, path: Path, text: str) -> bool:
        """Create `path` holding `text` (mode 0600) unless it exists; readers never see it half written. True if
        this call created it."""
        tmp = path.with_name(f"{self.environment}.{path.suffix.lstrip('.')}.{uuid.uuid4().hex[:8]}.tmp{os.getpid()}")
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    @contextmanager
    def lock(self, operation: str) -> Iterator[LockInfo]:
        self.directory.mkdir(parents=True, exist_ok=True)
        info = LockInfo.new(operation)
        if not self._create_exclusive(self.lock_path, info.to_json()):
            raise locked_error(self.lock_holder(), f"unreadable lock file {self.lock_path}")
        try:
            yield info
        finally:
            holder = self.lock_holder()
            if holder is not None and holder.id == info.id:  # it may have been force-unlocked and taken since
                self.lock_path.unlink(missing_ok=True)

    def lock_holder(self) -> LockInfo | None:
        try:
            return LockInfo.from_json(self.lock_path.read_text())
        except OSError:
            return None

    def force_unlock(self, lock_id: str) -> None:
        check_unlock(self.lock_holder(), lock_id)
        self.lock_path.unlink(missing_ok=True)


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())




def from_settings(settings: StateSettings, root: Path, environment: str) -> LocalStateBackend:
    return LocalStateBackend(root / settings.path / "state", environment)
