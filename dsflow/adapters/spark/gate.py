"""At most N micro-batches at once in a shared Spark application (`runtime.batches_at_once`).

Each micro-batch of a query borrows Spark's driver-side Python workers: one to plan the write
(`write_into_data_source`, ~50-75 MB with pyarrow, forked afresh when the idle pool is empty), one to plan the read,
one to commit. On a machine with fewer cores than queries, batches wait for CPU while they hold them, so the number
held at once, and the memory, grows with the number of queries (docs/benchmarks.md, "Batches at once").

- **The gate** lives in the host (`BatchGate`): a Unix socket in a private folder, whose path the host puts in its
  environment (`GATE_ENV`) before it starts the JVM, so every Python worker Spark starts inherits it.
- **A reader asks** (`admit`): a source's `latestOffset` that found data to read asks for a slot before it returns,
  naming its query (the `QUERY_OPTION` reader option, set by `gate_options` in the host only). Slots are given
  first come, first served. Another source of a query holding a slot is let through (the same batch); a reader
  that already went through asking again starts the query's next batch, so the query gives its slot back and
  queues behind the others (Spark runs a query's batches one after the other).
- **A slot is given back** when the query's batch ends (Spark's progress event, `release_after`), when the query
  stops or fails (`release`), or when the reader's connection closes (its source runner exited).

Without the environment variable (a query in its own driver), or when the gate cannot be reached, `admit` lets the
batch run at once: the gate bounds memory, it never stops a query.

**Holding a query** (every process that runs queries, gate or not): a stop must come between two micro-batches, or
the batch it interrupts (its records written, its commit not yet in the checkpoint) runs again on restart and
writes its records twice. Spark has no such stop, so the driver holds the query's sources first (`hold`: a file in
a private folder of the process, which every source's reader options name, `HOLD_OPTION`): from then on
`admitted` answers each source's `latestOffset` with its start, so no new batch starts, and the driver stops the
query once no batch runs (`driver.stop_between_batches`).
"""

from __future__ import annotations

import atexit
import os
import selectors
import shutil
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

GATE_ENV = "DSFLOW_BATCH_GATE"
QUERY_OPTION = "dsflow.gate.query"
HOLD_OPTION = "dsflow.hold.file"
HOLD_PREFIX = "dsflow-hold-"
SEEN = ".seen"
"""Beside a hold file: one line (the source runner's PID) per held answer of a reader."""
FOLDER_PREFIX = "dsflow-gate-"
STALE_AFTER_S = 60.0
WAIT_LIMIT_S = 600.0
"""A reader waiting longer than this for a slot goes on without one (a gate that stopped answering)."""


def gate_options(query: str) -> dict[str, str]:
    """The reader options of a query's sources: the file that holds them (`HOLD_OPTION`, always) and, in a process
    that runs a gate (the host), the query's name as Spark knows it (`spark_query_name`)."""
    held = {HOLD_OPTION: hold_path(query)}
    return {QUERY_OPTION: spark_query_name(query), **held} if os.environ.get(GATE_ENV) else held


def spark_query_name(query: str) -> str:
    """The name a dsflow query runs under in Spark (`queryName`), which its progress events carry."""
    return query.replace(".", "_")


@dataclass(frozen=True)
class ReaderGate:
    """What a source's `latestOffset` asks before it starts a batch: the gate's slot for `query` (None: no gate)
    and whether the file `hold` exists (the query is stopping: no batch starts)."""

    query: str | None
    hold: str | None = None


def gated_query(options: Mapping[str, str]) -> ReaderGate:
    """The gate a reader asks, from its data source options (keys possibly lower-cased)."""
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    return ReaderGate(lowered.get(QUERY_OPTION), lowered.get(HOLD_OPTION))


@dataclass
class _Holder:
    readers: set[socket.socket]
    """The connections of the query's readers that went through in this batch."""
    since: float


class BatchGate:
    """Slots for micro-batches, given over a Unix socket to the readers of the host's queries."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        sweep_stale(Path(tempfile.gettempdir()))
        self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))  # 0700: only this user can connect
        self.path = str(self.folder / "gate.sock")
        self.holders: dict[str, _Holder] = {}
        self.waiting: deque[tuple[str, socket.socket]] = deque()
        self.lock = threading.Lock()
        self.granted = 0
        self.most_held = 0
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(256)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.server, selectors.EVENT_READ)
        self.buffers: dict[socket.socket, bytes] = {}
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="dsflow-batch-gate", daemon=True)
        self.thread.start()

    def resize(self, slots: int) -> None:
        with self.lock:
            self.slots = slots
            self._grant()

    def release(self, query: str) -> None:
        """The query stops or failed: its slot goes to the next waiting query, and a reader of it still waiting is
        let through without one (a query being stopped finishes its batch, it does not queue for it)."""
        with self.lock:
            for waiting in [w for w in self.waiting if w[0] == query]:
                self.waiting.remove(waiting)
                _answer(waiting[1])
            self.holders.pop(query, None)
            self._grant()

    def release_after(self, query: str, ended_at: float) -> None:
        """A batch of the query ended at `ended_at` (epoch s): its slot is given back unless it was given for a
        later batch (the progress event arrives after the query asked again)."""
        with self.lock:
            holder = self.holders.get(query)
            if holder is not None and holder.since <= ended_at:
                del self.holders[query]
                self._grant()

    def slot_of(self, query: str) -> str:
        """held (a batch of the query may run), waiting (its next batch waits for a slot), or free."""
        with self.lock:
            if query in self.holders:
                return "held"
            return "waiting" if any(w[0] == query for w in self.waiting) else "free"

    def report(self) -> dict[str, int]:
        with self.lock:
            return {"slots": self.slots, "held": len(self.holders), "waiting": len(self.waiting),
                    "granted": self.granted, "most_held": self.most_held}

    def close(self) -> None:
        self.closed.set()
        self.thread.join(timeout=5)
        self.server.close()
        Path(self.path).unlink(missing_ok=True)
        self.folder.rmdir()

    def _serve(self) -> None:
        while not self.closed.is_set():
            for key, _ in self.selector.select(timeout=0.2):
                if key.fileobj is self.server:
                    connection, _ = self.server.accept()
                    self.selector.register(connection, selectors.EVENT_READ)
                    self.buffers[connection] = b""
                else:
                    self._read(cast(socket.socket, key.fileobj))  # a connection it registered

    def _read(self, connection: socket.socket) -> None:
        try:
            data = connection.recv(4096)
        except OSError:
            data = b""
        if not data:
            self._forget(connection)
            return
        buffered = self.buffers[connection] + data
        *lines, self.buffers[connection] = buffered.split(b"\n")
        for line in lines:
            verb, _, query = line.decode("utf-8", "replace").partition(" ")
            if verb == "acquire" and query:
                self._acquire(query, connection)

    def _acquire(self, query: str, connection: socket.socket) -> None:
        with self.lock:
            holder = self.holders.get(query)
            if holder is not None and connection not in holder.readers:  # another source, the same batch
                holder.readers.add(connection)
                _answer(connection)
                return
            if holder is not None:  # its next batch, asked before the last one's progress event came
                del self.holders[query]
            self.waiting.append((query, connection))
            self._grant()

    def _forget(self, connection: socket.socket) -> None:
        self.selector.unregister(connection)
        self.buffers.pop(connection, None)
        connection.close()
        with self.lock:
            self.waiting = deque(w for w in self.waiting if w[1] is not connection)
            for query in [q for q, h in self.holders.items() if connection in h.readers]:
                del self.holders[query]
            self._grant()

    def _grant(self) -> None:
        """Under the lock: the waiting queries, first come first served, while slots are free."""
        while self.waiting and len(self.holders) < self.slots:
            query, connection = self.waiting.popleft()
            if query in self.holders:  # two sources of the query were waiting
                self.holders[query].readers.add(connection)
            else:
                self.holders[query] = _Holder({connection}, time.time())
                self.granted += 1
                self.most_held = max(self.most_held, len(self.holders))
            _answer(connection)


def sweep_stale(root: Path) -> None:
    """Remove the folders of gates whose host died (kill -9): a socket older than STALE_AFTER_S that nobody
    answers on. A younger one may be a host's between its bind and its listen."""
    for folder in root.glob(f"{FOLDER_PREFIX}*"):
        path = folder / "gate.sock"
        try:
            if time.time() - path.lstat().st_mtime < STALE_AFTER_S:
                continue
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.connect(str(path))
        except ConnectionRefusedError:
            path.unlink(missing_ok=True)
            _remove_folder(folder)
        except OSError:
            continue


def _remove_folder(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def _answer(connection: socket.socket) -> None:
    try:
        connection.sendall(b"ok\n")
    except OSError:
        pass  # the reader is gone: _forget gives the slot back when the selector sees the closed connection


class GateClient:
    """A reader's connection to its application's gate (one per source runner process)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.connection: socket.socket | None = None

    def admit(self, query: str) -> float:
        """Wait for a slot for `query`; the seconds waited. A gate that cannot be reached lets it through."""
        began = time.monotonic()
        try:
            if self.connection is None:
                self.connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.connection.settimeout(WAIT_LIMIT_S)
                self.connection.connect(self.path)
            self.connection.sendall(f"acquire {query}\n".encode())
            _read_line(self.connection)
        except OSError:
            self.close()
        return time.monotonic() - began

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
        self.connection = None


_client: GateClient | None = None


def admit(query: str | None) -> float:
    """Wait until the application's gate lets `query` run a micro-batch; the seconds waited. No gate in this
    process's environment, or no query name: 0, at once."""
    global _client
    path = os.environ.get(GATE_ENV)
    if not path or not query:
        return 0.0
    if _client is None or _client.path != path:
        _client = GateClient(path)
    return _client.admit(query)


def admitted(gate: ReaderGate | None, start: Mapping, end: dict) -> dict:
    """`end`, once the gate let the query run a batch to it (none to run when it is `start`); `start` (no new data)
    while the query is held."""
    if end != start and gate is not None:
        if gate.hold and os.path.exists(gate.hold):
            _held(gate.hold)
            return dict(start)
        admit(gate.query)
    return end


def _held(path: str) -> None:
    """Note that this reader (its source runner process) answered a held `latestOffset` (`held_twice`)."""
    try:
        with open(path + SEEN, "a", encoding="utf-8") as seen:
            seen.write(f"{os.getpid()}\n")
    except OSError:  # released meanwhile: the driver no longer counts
        pass


_hold_folder: str | None = None


def hold_path(query: str) -> str:
    """The file whose existence holds `query`'s sources: in a folder of this process (0700, removed at exit), named
    by the query as Spark knows it. The process that builds a query's DataFrame is the one that stops it."""
    global _hold_folder
    if _hold_folder is None:
        _hold_folder = tempfile.mkdtemp(prefix=HOLD_PREFIX)
        atexit.register(shutil.rmtree, _hold_folder, True)
    return os.path.join(_hold_folder, spark_query_name(query))


def hold(query: str) -> None:
    """From now on `query`'s sources find no new data: a micro-batch that has not asked for its end offsets yet
    reads nothing (a trigger without a batch), one that has runs to its end."""
    Path(hold_path(query) + SEEN).unlink(missing_ok=True)
    Path(hold_path(query)).touch()


def held_twice(query: str) -> bool:
    """A source of the held `query` answered held in two triggers: the trigger of its first answer has ended, and
    every trigger since started after the hold, so none reads new data. (One answer is not enough: in the trigger
    of a query's first held answer another source may have answered before the hold, with data.)"""
    try:
        readers = Path(hold_path(query) + SEEN).read_text(encoding="utf-8").split()
    except OSError:
        return False
    return any(readers.count(pid) >= 2 for pid in set(readers))


def release(query: str) -> None:
    Path(hold_path(query)).unlink(missing_ok=True)
    Path(hold_path(query) + SEEN).unlink(missing_ok=True)


def _read_line(connection: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        chunk = connection.recv(64)
        if not chunk:
            raise OSError("the gate closed the connection")
        line += chunk
    return line
