"""The batch gate of a shared application (adapters/spark/gate.py), over its real Unix socket: slots given first
come first served, given back at a batch's end, a stop, or a reader's exit; never given back for a later batch.
The gate in a running application is checked against Spark's own checkpoints in test_shared_drivers.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from dsflow.adapters.spark.gate import (BatchGate, GateClient, ReaderGate, admitted, gate_options, gated_query, hold,
                                        hold_path, release, spark_query_name)


@pytest.fixture
def gate() -> Iterator[BatchGate]:
    made = BatchGate(2)
    yield made
    made.close()


class Waiting:
    """A reader asking for a slot in a thread of its own."""

    def __init__(self, gate: BatchGate, query: str) -> None:
        self.client = GateClient(gate.path)
        self.query = query
        self.admitted = threading.Event()
        threading.Thread(target=self._ask, daemon=True).start()

    def _ask(self) -> None:
        self.client.admit(self.query)
        self.admitted.set()

    def again(self) -> Waiting:
        self.admitted.clear()
        threading.Thread(target=self._ask, daemon=True).start()
        return self


def _settle(gate: BatchGate, held: int, waiting: int) -> None:
    deadline = time.monotonic() + 5
    while (gate.report()["held"], gate.report()["waiting"]) != (held, waiting):
        assert time.monotonic() < deadline, gate.report()
        time.sleep(0.01)


def _two_held_one_waiting(gate: BatchGate) -> tuple[Waiting, Waiting, Waiting]:
    """a and b hold the gate's two slots; c waits."""
    a, b = Waiting(gate, "a"), Waiting(gate, "b")
    assert a.admitted.wait(5) and b.admitted.wait(5)
    c = Waiting(gate, "c")
    _settle(gate, held=2, waiting=1)
    return a, b, c


def test_slots_are_given_first_come_first_served_and_given_back_at_a_batch_end(gate: BatchGate) -> None:
    a, b, c = _two_held_one_waiting(gate)
    d = Waiting(gate, "d")
    _settle(gate, held=2, waiting=2)
    assert not c.admitted.is_set() and not d.admitted.is_set()
    gate.release_after("b", time.time())
    assert c.admitted.wait(5)
    assert not d.admitted.wait(0.3), "a third query ran with two slots"
    assert (gate.slot_of("a"), gate.slot_of("d"), gate.slot_of("b")) == ("held", "waiting", "free")
    gate.release("a")  # a query stopped or failed
    assert d.admitted.wait(5)
    assert gate.report() | {"granted": 4, "most_held": 2} == gate.report()


def test_another_source_of_a_query_holding_a_slot_is_let_through(gate: BatchGate) -> None:
    a, b = Waiting(gate, "a"), Waiting(gate, "b")
    assert a.admitted.wait(5) and b.admitted.wait(5)
    second_source_of_a = Waiting(gate, "a")
    assert second_source_of_a.admitted.wait(5)
    assert gate.report()["held"] == 2


def test_the_next_batch_of_a_query_queues_behind_the_waiting_ones(gate: BatchGate) -> None:
    a, b, c = _two_held_one_waiting(gate)
    a.again()  # a's next batch, before the progress event of its last one
    assert c.admitted.wait(5), "c waited behind a query that went on batch after batch"
    assert not a.admitted.wait(0.3)
    gate.release_after("c", time.time())
    assert a.admitted.wait(5)


def test_the_next_batch_of_a_query_goes_on_when_nobody_waits(gate: BatchGate) -> None:
    a = Waiting(gate, "a")
    assert a.admitted.wait(5)
    assert a.again().admitted.wait(5)
    assert gate.report()["held"] == 1


def test_a_progress_event_of_an_earlier_batch_does_not_take_the_slot_of_the_next(gate: BatchGate) -> None:
    a = Waiting(gate, "a")
    assert a.admitted.wait(5)
    ended = time.time()
    time.sleep(0.01)
    assert a.again().admitted.wait(5)  # the next batch asked before the event of the last one came
    gate.release_after("a", ended)
    assert gate.report()["held"] == 1
    gate.release_after("a", time.time())
    assert gate.report()["held"] == 0


def test_a_reader_that_exits_gives_its_slot_back(gate: BatchGate) -> None:
    a, b, c = _two_held_one_waiting(gate)
    a.client.close()
    assert c.admitted.wait(5)
    _settle(gate, held=2, waiting=0)


def test_a_waiting_reader_that_exits_is_forgotten(gate: BatchGate) -> None:
    a, b, c = _two_held_one_waiting(gate)
    c.client.connection.shutdown(2)
    _settle(gate, held=2, waiting=0)
    gate.release("a")
    _settle(gate, held=1, waiting=0)


def test_a_query_being_stopped_is_not_kept_waiting(gate: BatchGate) -> None:
    a, b, c = _two_held_one_waiting(gate)
    gate.release("c")
    assert c.admitted.wait(5)
    _settle(gate, held=2, waiting=0)


def test_more_slots_let_waiting_queries_through(gate: BatchGate) -> None:
    waiting = [Waiting(gate, q) for q in "abcd"]
    _settle(gate, held=2, waiting=2)
    gate.resize(4)
    assert all(w.admitted.wait(5) for w in waiting)


def test_a_gate_that_cannot_be_reached_lets_the_batch_run(tmp_path) -> None:
    client = GateClient(str(tmp_path / "no.sock"))
    assert client.admit("a") < 1 and client.connection is None


def test_only_a_batch_with_something_to_read_asks(gate: BatchGate, monkeypatch) -> None:
    monkeypatch.setenv("DSFLOW_BATCH_GATE", gate.path)
    assert admitted(ReaderGate("a"), {"0": 5}, {"0": 5}) == {"0": 5}
    assert gate.report()["granted"] == 0
    assert admitted(ReaderGate("a"), {"0": 5}, {"0": 7}) == {"0": 7}
    assert gate.report()["held"] == 1


def test_readers_are_told_their_query_only_where_a_gate_runs(monkeypatch) -> None:
    monkeypatch.delenv("DSFLOW_BATCH_GATE", raising=False)
    assert gated_query(gate_options("db.public.q")).query is None
    monkeypatch.setenv("DSFLOW_BATCH_GATE", "/x/gate.sock")
    options = gate_options("db.public.q")
    assert gated_query({k.upper(): v for k, v in options.items()}).query == spark_query_name("db.public.q") \
        == "db_public_q"


def test_a_held_query_starts_no_batch_until_released(monkeypatch) -> None:
    """While the driver stops a query its sources find no new data (their start), with or without a gate."""
    monkeypatch.delenv("DSFLOW_BATCH_GATE", raising=False)
    reader = gated_query({k.upper(): v for k, v in gate_options("db.public.q").items()})
    assert reader.hold == hold_path("db.public.q")
    assert admitted(reader, {"0": 5}, {"0": 7}) == {"0": 7}
    hold("db.public.q")
    try:
        assert admitted(reader, {"0": 5}, {"0": 7}) == {"0": 5}
        assert admitted(gated_query(gate_options("db.public.other")), {"0": 5}, {"0": 7}) == {"0": 7}
    finally:
        release("db.public.q")
    assert admitted(reader, {"0": 5}, {"0": 7}) == {"0": 7}


def test_the_folder_of_a_gate_whose_host_died_is_swept(tmp_path) -> None:
    import os
    import socket

    from dsflow.adapters.spark.gate import FOLDER_PREFIX, STALE_AFTER_S, sweep_stale

    def gate_folder(name: str, listening: bool, age: float):
        folder = tmp_path / f"{FOLDER_PREFIX}{name}"
        folder.mkdir()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(folder / "gate.sock"))
        if listening:
            server.listen(1)
        else:
            server.close()
        past = time.time() - age
        os.utime(folder / "gate.sock", (past, past))
        return folder, server

    dead, _ = gate_folder("dead", listening=False, age=STALE_AFTER_S + 5)
    young, _ = gate_folder("young", listening=False, age=1)
    live, server = gate_folder("live", listening=True, age=STALE_AFTER_S + 5)
    sweep_stale(tmp_path)
    assert not dead.exists() and young.exists() and live.exists()
    server.close()
