"""The local state backend: a JSON file per environment and a lock file holding who/when/what."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dsflow.adapters.state.base import LockInfo, check_current, check_unlock, locked_error
from dsflow.core.model import StateSettings
from dsflow.core.state import State
from dsflow.errors import DsflowError

__all__ = ["LocalStateBackend", "LockInfo", "from_settings"]


class LocalStateBackend:
    """State at <dir>/<environment>.json, written atomically; lock at <environment>.lock.

    A write replaces the file by rename, after copying the previous one to <environment>.json.backup.
    A compare-and-swap write holds an flock on <environment>.json.wlock while it compares and renames.
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

    def read(self) -> State:
        if not self.path.exists():
            return State(environment=self.environment)
        try:
            return State.model_validate_json(self.path.read_text())
        except ValueError as err:
            raise DsflowError("DSF-E801", f"state file {self.path} is unreadable: {err}",
                              hint="restore it from a backup (<env>.json.backup)") from err

    def write(self, state: State, *, expected_serial: int | None = None) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".json.wlock"), "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            if expected_serial is not None:
                stored = self.read() if self.path.exists() else None
                check_current((stored.serial, stored.lineage) if stored else None, state, expected_serial,
                              str(self.path))
            self._replace(state)

    def _replace(self, state: State) -> None:
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(state.model_dump_json(indent=2))
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        if self.path.exists():
            backup_tmp = self.path.with_suffix(f".backup.tmp{os.getpid()}")
            shutil.copyfile(self.path, backup_tmp)
            os.replace(backup_tmp, self.path.with_suffix(".json.backup"))
        os.replace(tmp, self.path)

    @contextmanager
    def lock(self, operation: str) -> Iterator[LockInfo]:
        self.directory.mkdir(parents=True, exist_ok=True)
        info = LockInfo.new(operation)
        try:
            fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            raise locked_error(self.lock_holder(), f"unreadable lock file {self.lock_path}") from None
        with os.fdopen(fd, "w") as handle:
            handle.write(info.to_json())
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


def from_settings(settings: StateSettings, root: Path, environment: str) -> LocalStateBackend:
    return LocalStateBackend(root / settings.path / "state", environment)
