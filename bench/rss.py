"""Peak resident memory of this process and its descendants while a benchmark run lasts.

The Spark driver's JVM is a descendant of the Python process that started the session (through spark-submit),
and Spark's Python workers are the JVM's: `psutil` on the tree from here sees all three. Sampled by a thread
every `every` seconds, so a peak shorter than that can be missed. Processes named in `skip` and theirs are not
counted: the harness's own Kafka broker is a child of the same Python process.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import TracebackType

MIB = 1024 * 1024


@dataclass
class Peak:
    """Highest RSS seen, in MiB: the whole tree, the JVM(s) alone, and the tree when sampling began."""

    total_mib: float = 0.0
    jvm_mib: float = 0.0
    start_mib: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"rss_peak_mib": round(self.total_mib), "rss_jvm_peak_mib": round(self.jvm_mib),
                "rss_start_mib": round(self.start_mib)}


def tree_rss(skip: frozenset[int] = frozenset()) -> tuple[float, float]:
    """(RSS of this process and every descendant, RSS of the java processes among them), in MiB, leaving out the
    processes in `skip` and their descendants; a process that ends while it is read counts nothing."""
    import psutil

    me = psutil.Process()
    tree = me.children(recursive=True)
    left_out = set(skip)
    for proc in tree:
        if proc.pid in skip:
            try:
                left_out.update(c.pid for c in proc.children(recursive=True))
            except psutil.NoSuchProcess:
                continue
    total = jvm = 0.0
    for proc in [me, *(p for p in tree if p.pid not in left_out)]:
        try:
            rss = proc.memory_info().rss / MIB
            name = proc.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += rss
        if name == "java":
            jvm += rss
    return total, jvm


class PeakRss:
    """`with PeakRss() as peak:` ... then `peak.result`: the highest RSS sampled while the block ran."""

    def __init__(self, every: float = 0.25, skip: frozenset[int] = frozenset()) -> None:
        self.every = every
        self.skip = skip
        self.result = Peak()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)

    def __enter__(self) -> PeakRss:
        total, jvm = tree_rss(self.skip)
        self.result = Peak(total, jvm, total)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self._record()

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            self._record()

    def _record(self) -> None:
        total, jvm = tree_rss(self.skip)
        self.result.total_mib = max(self.result.total_mib, total)
        self.result.jvm_mib = max(self.result.jvm_mib, jvm)
