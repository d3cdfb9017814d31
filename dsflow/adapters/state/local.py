"""The local state backend: a JSON file per environment and a lock file holding who/when/what."""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator

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

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.created))
        return f"lock {self.id} held by {self.who} (pid {self.pid}) for '{self.operation}' since {when}"


class LocalStateBackend:
    """State at <dir>/<environment>.json, written atomically; lock at <environment>.lock."""

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

    def write(self, state: State) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            os.replace(self.path, self.path.with_suffix(".json.backup"))
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(state.model_dump_json(indent=2))
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    @contextmanager
    def lock(self, operation: str) -> Iterator[LockInfo]:
        self.directory.mkdir(parents=True, exist_ok=True)
        info = LockInfo(id=str(uuid.uuid4()), who=f"{getpass.getuser()}@{socket.gethostname()}",
                        operation=operation, created=time.time(), pid=os.getpid())
        try:
            fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            holder = self.lock_holder()
            detail = holder.describe() if holder else "an unreadable lock file"
            raise DsflowError("DSF-E802", f"state is locked: {detail}",
                              hint=f"wait for it to finish, or run 'dsflow force-unlock {holder.id if holder else ''}'")
        with os.fdopen(fd, "w") as handle:
            json.dump(info.__dict__, handle)
        try:
            yield info
        finally:
            self.lock_path.unlink(missing_ok=True)

    def lock_holder(self) -> LockInfo | None:
        try:
            return LockInfo(**json.loads(self.lock_path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def force_unlock(self, lock_id: str) -> None:
        holder = self.lock_holder()
        if holder is None:
            raise DsflowError("DSF-E803", "state is not locked")
        if holder.id != lock_id:
            raise DsflowError("DSF-E803", f"lock id {lock_id} does not match the holder's {holder.id}")
        self.lock_path.unlink(missing_ok=True)
