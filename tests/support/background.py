"""Events produced in the background while an apply runs (the blue/green and real-time tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Producer:
    """`produce(first, count)` called in a thread of its own, `count` new ids every `every` seconds from `first`;
    `next` is the first id not produced yet."""

    def __init__(self, produce: Callable[[int, int], None], first: int, count: int, every: float):
        self.produce, self.next, self.count, self.every = produce, first, count, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            self.produce(self.next, self.count)
            self.next += self.count

    def __enter__(self) -> Producer:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()
