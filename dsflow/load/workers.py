"""Parsing and resolving SQL on every core: forked workers that own a share of the project's statements.

sqlglot's parser and the resolution of SELECTs (qualify, annotate_types) are ~80% of a cold `dsflow plan`
(docs/benchmarks.md, "Plan time"), and both are pure Python, so one process uses one core. SQLMesh loads models
in forked processes for the same reason. Here the loading process cuts the SQL files into statements
(sql/parse.py's statement_spans), then forks workers; each worker, and the loading process itself, tokenizes
and parses its own share of the statements. Workers send their statements back as the load cache's plain data
(sql/filecache.py), keep the trees, and later resolve the SELECTs they parsed, one dependency wave at a time,
from the relations the loading process sends them. The loading process replays their diagnostics, so the project
and every diagnostic are those of a load in one process: a file with a syntax error (or cut wrongly) is parsed
again as a whole by the loading process, and a worker that fails has its work done there.

Used on Linux only (fork), with more than one core, and for enough SQL to pay for the fork;
`DSFLOW_LOAD_WORKERS` sets the number of processes (1: never fork).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from dsflow.errors import Diagnostic
from dsflow.sql.statements import Analysed, RawStatement

MIN_SQL_CHARS = 40_000
"""Less SQL than this to parse (~250 statements) is loaded in one process: forking and sending the results back
costs more than it saves."""
MAX_PROCESSES = 8
SELECT_COST = 800
"""Resolving a SELECT costs about as much as parsing this many characters (~4 statements)."""
STOLEN_COST = 1.25
"""Resolving a statement another process parsed costs this process this many resolutions (it parses it too)."""

_SELECT = re.compile(r"\bselect\b", re.I)
Files = list[tuple[str, str]]
"""(path in the project, rendered text) of SQL files."""
Parsed = dict[str, tuple[list[RawStatement], list[Diagnostic]]]
StatementKey = tuple[str, int, int]
Resolution = tuple[Analysed | None, list[Diagnostic]]


@dataclass(frozen=True)
class _Job:
    """One statement to parse: its file, its place among the file's statements, where its text lies."""

    rel: str
    index: int
    span: Any  # sql.parse.Span
    text: str = field(repr=False)

    @property
    def cost(self) -> int:
        select = _SELECT.search(self.text, self.span.start, self.span.end) is not None
        return self.span.end - self.span.start + (SELECT_COST if select else 0)

    def parse(self) -> tuple[RawStatement | None, list[Diagnostic]] | None:
        """The statement and its diagnostics, or None if its span was cut wrongly (parse the whole file)."""
        from dsflow.sql.parse import parse_statement, tokenize_span

        tokens = tokenize_span(self.text, self.span)
        if tokens is None:
            return None
        return parse_statement(tokens, self.text, self.rel) if tokens else (None, [])


@dataclass
class _Worker:
    process: Any
    conn: Any
    jobs: list[_Job]
    sent: set[str] = field(default_factory=set)
    """The relations this worker has been sent (by fqn)."""
    results: dict[StatementKey, Resolution] = field(default_factory=dict)


def statement_key(st: RawStatement) -> StatementKey:
    """A statement's identity across processes: where it starts (file, line, column)."""
    return (st.location.file, st.location.line, st.location.col)


def process_count(files: Files) -> int:
    """How many processes (the loading one included) should load these files."""
    if not sys.platform.startswith("linux"):
        return 1
    setting = os.environ.get("DSFLOW_LOAD_WORKERS", "").strip()
    if setting.isdigit():
        return max(1, min(int(setting), MAX_PROCESSES))
    if sum(len(text) for _, text in files) < MIN_SQL_CHARS:
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), MAX_PROCESSES))


class Workers:
    """Forked workers, each owning a share of the statements: they parse them, then resolve their SELECTs."""

    def __init__(self, workers: list[_Worker], own: list[_Job], counts: dict[str, int], files: Files,
                 default_names: tuple[str, str]):
        self._workers = workers
        self._own = own
        self._counts = counts
        """Each file's number of statement spans."""
        self._files = files
        self._default_names = default_names
        self._owner: dict[StatementKey, _Worker] = {}
        self._pending: dict[StatementKey, _Worker] = {}
        self._local: dict[StatementKey, Resolution] = {}
        self._job_of: dict[StatementKey, _Job] = {}

    @classmethod
    def start(cls, files: Files, count: int, default_names: tuple[str, str]) -> Workers:
        """Cut `files` into statements and fork count - 1 workers (default_names: the default database and
        schema). A file with a carriage return is left whole to this process (the cut counts lines by \\n)."""
        import multiprocessing

        from dsflow.sql.parse import statement_spans

        jobs, counts = [], {}
        for rel, text in files:
            spans = statement_spans(text) if "\r" not in text else []
            counts[rel] = len(spans)
            jobs += [_Job(rel, index, span, text) for index, span in enumerate(spans)]
        shares = _shares(jobs, count)
        context = multiprocessing.get_context("fork")
        workers: list[_Worker] = []
        for share in shares[1:]:
            try:
                parent, child = context.Pipe()
                process = context.Process(target=_serve, args=(child, share), daemon=True)
                process.start()
            except OSError:
                shares[0] += share  # could not fork: this process parses that share too
                continue
            child.close()
            workers.append(_Worker(process, parent, share))
        return cls(workers, shares[0], counts, files, default_names)

    def parse(self) -> Parsed:
        """Every file's statements and diagnostics: this process parses its share while the workers parse theirs.
        A file with a diagnostic, cut wrongly, or whose worker failed is parsed here as a whole."""
        from dsflow.sql.filecache import FileParse, decode_statement
        from dsflow.sql.parse import parse_sql_file

        done: dict[tuple[str, int], tuple[Any, list[Diagnostic], _Job, _Worker | None] | None] = {}
        for job in self._own:
            got = job.parse()
            done[(job.rel, job.index)] = None if got is None else (*got, job, None)
        for worker in list(self._workers):
            answer = self._receive(worker)
            for job in worker.jobs:
                got = answer[(job.rel, job.index)] if answer is not None else None
                if got is not None and got[0] is None and not got[1]:
                    got = job.parse()  # a statement the worker could not encode: parsed here
                    done[(job.rel, job.index)] = None if got is None else (*got, job, None)
                else:
                    done[(job.rel, job.index)] = None if got is None else (*got, job, worker)
        parsed: Parsed = {}
        for rel, text in self._files:
            items = [done[(rel, index)] for index in range(self._counts[rel])]
            if not items or any(item is None or item[1] for item in items):
                parsed[rel] = parse_sql_file(text, rel)
                continue
            # the lambda binds this file's text and name; mypy infers no type for a lambda with defaults
            file = FileParse(lambda t=text, r=rel: parse_sql_file(t, r)[0])  # type: ignore[misc]
            statements: list[RawStatement] = []
            for entry in items:
                assert entry is not None  # a file with a statement cut wrongly was parsed whole, above
                item, _, job, owner = entry
                if item is None:
                    continue
                st = item if owner is None else decode_statement(item, rel, file, len(statements))
                if owner is not None and st.is_query:
                    self._owner[statement_key(st)] = owner
                    self._job_of[statement_key(st)] = job
                statements.append(st)
            parsed[rel] = (statements, [])
        return parsed

    def request(self, items: list[tuple[RawStatement, list[Any]]]) -> None:
        """Resolve the SELECTs of these statements: each item is a statement and the relations its SELECT reads.
        The workers that parsed them are asked to, and this process resolves the others meanwhile."""
        mine: list[tuple[StatementKey, RawStatement, list[Any]]] = []
        theirs: dict[int, tuple[_Worker, list[tuple[StatementKey, RawStatement, list[Any]]]]] = {
            id(w): (w, []) for w in self._workers}
        for st, relations in items:
            key = statement_key(st)
            if key in self._pending or key in self._local:
                continue
            worker = self._owner.get(key)
            (theirs[id(worker)][1] if worker is not None else mine).append((key, st, relations))
        mine += self._balance(mine, [batch for _, batch in theirs.values()])
        for worker, batch in theirs.values():
            if not batch:
                continue
            wire = []
            for key, _, relations in batch:
                new = [r for r in relations if r.fqn not in worker.sent]
                worker.sent |= {r.fqn for r in new}
                wire.append((key, new))
                self._pending[key] = worker
            self._send(worker, ("resolve", self._default_names, wire))
        for key, st, relations in mine:
            self._local[key] = _resolve(st, {r.fqn: r for r in relations}, self._default_names)

    def _balance(self, mine: list, batches: list[list]) -> list:
        """Take statements from the workers with the most to resolve in this wave until this process has about
        as much (a taken statement is parsed here again: STOLEN_COST of a resolution); returns
        the taken ones, parsed here."""
        taken: list = []
        while batches:
            biggest = max(batches, key=len)
            if len(biggest) <= (len(mine) + len(taken)) * STOLEN_COST + 1:
                break
            key, _, relations = biggest.pop()
            got = self._job_of[key].parse()
            if got is not None and got[0] is not None:
                taken.append((key, got[0], relations))
        return taken

    def resolved(self, st: RawStatement) -> Resolution | None:
        """A requested statement's resolution (waiting for its worker), or None if this process must do it."""
        key = statement_key(st)
        if key in self._local:
            return self._local.pop(key)
        worker = self._pending.pop(key, None)
        if worker is None:
            return None
        while key not in worker.results:
            answer = self._receive(worker)
            if answer is None:
                return None
            worker.results |= dict(answer)
        return worker.results.pop(key)

    def close(self) -> None:
        for worker in list(self._workers):
            self._send(worker, ("stop",))
        for worker in self._workers:
            worker.process.join(timeout=2)
            if worker.process.is_alive():
                worker.process.kill()
        self._workers = []

    def _send(self, worker: _Worker, message: tuple) -> None:
        if worker not in self._workers:
            return
        try:
            worker.conn.send(message)
        except (OSError, ValueError):
            self._drop(worker)

    def _receive(self, worker: _Worker) -> Any:
        if worker not in self._workers:
            return None
        try:
            kind, payload = worker.conn.recv()
        except (OSError, EOFError):
            kind, payload = "failed", None
        if kind != "ok":
            self._drop(worker)
            return None
        return payload

    def _drop(self, worker: _Worker) -> None:
        """A worker that failed: forget it; what it owned is done in this process from here on."""
        self._workers.remove(worker)
        self._owner = {k: w for k, w in self._owner.items() if w is not worker}
        self._pending = {k: w for k, w in self._pending.items() if w is not worker}
        worker.process.kill()


def _shares(jobs: list[_Job], count: int) -> list[list[_Job]]:
    """The statements dealt to `count` processes, each to the least loaded so far."""
    shares: list[list[_Job]] = [[] for _ in range(count)]
    loads = [0] * count
    for job in sorted(jobs, key=_scrambled):
        least = loads.index(min(loads))
        shares[least].append(job)
        loads[least] += job.cost
    return [sorted(share, key=lambda j: (j.rel, j.index)) for share in shares]


def _scrambled(job: _Job) -> bytes:
    """A fixed pseudo-random order: dealt in project order, a pattern in the project (every 4th query reads
    another query) would give one process all of a later dependency wave."""
    import hashlib

    return hashlib.blake2b(f"{job.rel}\0{job.index}".encode(), digest_size=8).digest()


def _serve(conn: Any, jobs: list[_Job]) -> None:
    """A worker: parse its statements, then resolve their SELECTs on request until told to stop."""
    try:
        from dsflow.sql.filecache import encode_statements

        own: dict[StatementKey, RawStatement] = {}
        answer: dict[tuple[str, int], tuple[list | None, list[Diagnostic]] | None] = {}
        for job in jobs:
            got = job.parse()
            st, problems = got if got is not None else (None, [])
            if st is None:  # cut wrongly (None), or not parsed: its diagnostics
                answer[(job.rel, job.index)] = None if got is None else (None, problems)
                continue
            encoded = encode_statements([st], job.rel)
            if st.is_query:
                own[statement_key(st)] = st
            answer[(job.rel, job.index)] = (encoded[0] if encoded else None, problems)
        conn.send(("ok", answer))
        _resolve_on_request(conn, own)
    except Exception as err:  # noqa: BLE001 - any failure is reported, and the loading process does the work
        try:
            conn.send(("failed", repr(err)))
        except (OSError, ValueError):
            pass
    finally:
        conn.close()
        os._exit(0)  # no atexit handlers, no cleanup of objects the fork inherited


def _resolve_on_request(conn: Any, own: dict[StatementKey, RawStatement]) -> None:
    relations: dict[str, Any] = {}
    while True:
        message = conn.recv()
        if message[0] != "resolve":
            return
        _, default_names, batch = message
        results = []
        for key, new in batch:
            relations |= {r.fqn: r for r in new}
            results.append((key, _resolve(own[key], relations, default_names)))
        conn.send(("ok", results))


def _resolve(st: RawStatement, relations: dict[str, Any], default_names: tuple[str, str]) -> Resolution:
    """sql/select.py's analyse_select, its diagnostics collected."""
    from dsflow.load.queries import qualified_name
    from dsflow.sql.select import analyse_select

    reported: list[Diagnostic] = []
    analysed = analyse_select(st.location.file, st, relations,
                              lambda parts: qualified_name(parts, *default_names), reported.append,
                              copy=False)  # each statement is resolved once, and its tree not read again
    return analysed, reported
