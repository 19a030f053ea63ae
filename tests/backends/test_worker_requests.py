"""A delivery worker has one owner (issue 43): the thread that steps it. The
agent's main thread, which learns that a run ended or that a tracker is to be
left to `rltrack sync`, only sends it requests (`end`, `stop`), applied at
the owner's next step. Here a lane (the agent's `Turns` thread) steps a
worker while a journal grows, and the test's own thread sends requests as
the agent's main thread does, over and over, as fast as it can: no value is
lost or doubled, whatever the interleaving. The tracker is a recording
backend, a stand-in for a tracker client (it keeps what `deliver` is given,
so a value delivered twice shows), because what is tested is delivery's
threads, not a store. The reliability lane runs it beside busy loops."""

from __future__ import annotations

import threading

import pytest

from rltrack.core.events import Event
from rltrack.core.report import Report
from rltrack.core.turns import Turns
from rltrack.delivery.worker import DeliveryWorker
from rltrack.journal import JournalWriter, journal_path
from rltrack.sinks.base import RunContext
from rltrack.sinks.rundir import create_run_dir
from rltrack.trackers.remote import EventId, RemoteBackend, Rules

pytestmark = pytest.mark.reliability

EVENTS = 3000
BOUND = 600.0  # seconds the lane may take to end (a starved machine), said if it does not


class Recording(RemoteBackend):
    """Keeps every value `deliver` is given, in order (see the module docstring)."""

    name = "recording"
    rules = Rules(max_batch=7)  # many small batches: many steps to interleave requests with

    def __init__(self, values: list[int]) -> None:
        self.values = values
        self.closed: list[str] = []

    def deliver(self, events: list[Event], ids: list[EventId]) -> None:
        self.values.extend(int(event.data["x"]) for event in events)

    def close(self, status: str) -> None:
        self.closed.append(status)


def worker_for(run_dir, values: list[int]) -> DeliveryWorker:
    backend = Recording(values)
    backend.open(RunContext(run_dir, "run", {"run": {"task": "requests"}}, Report()))
    return DeliveryWorker(backend, run_dir)


def write_journal(run_dir, start: int, stop: int) -> None:
    journal = JournalWriter(journal_path(run_dir, None))
    for step in range(start, stop):
        journal.append([Event(1_700_000_000.0 + step, {"x": float(step)}, namespace="learner", steps={"step": step})])
        if step % 50 == 0:
            journal.flush()
    journal.flush()


def wait_done(worker: DeliveryWorker, pester) -> None:
    """Pesters the worker from this thread until its lane has ended it."""
    done = threading.Event()
    lane = Turns("rltrack-test-lane", 0.01)
    lane.add(worker)
    waited = threading.Thread(target=lambda: (_join(lane), done.set()), daemon=True)
    waited.start()
    while not done.is_set():
        pester()
        done.wait(0.001)
    assert worker.done


def _join(lane: Turns) -> None:
    thread = lane._thread
    if thread is not None:
        thread.join(BOUND)
        assert not thread.is_alive(), f"the lane did not end its worker in {BOUND:.0f} s (pending requests or a stuck step)"


def test_end_requested_again_and_again_while_the_journal_grows_loses_and_doubles_nothing(tmp_path):
    run_dir = create_run_dir(tmp_path, "run")
    values: list[int] = []
    worker = worker_for(run_dir, values)
    writer = threading.Thread(target=write_journal, args=(run_dir, 0, EVENTS))
    writer.start()
    writer.join()
    wait_done(worker, lambda: worker.end("finished"))
    assert values == list(range(EVENTS))
    assert worker.backend.closed == ["finished"]  # type: ignore[attr-defined]
    assert worker.caught_up()


def test_a_stop_sent_mid_delivery_leaves_the_rest_to_a_later_delivery_without_doubles(tmp_path):
    run_dir = create_run_dir(tmp_path, "run")
    write_journal(run_dir, 0, EVENTS)
    values: list[int] = []
    first = worker_for(run_dir, values)
    stopped = threading.Event()

    def stop_once_started() -> None:
        if values and not stopped.is_set():  # mid-delivery: the lane has taken batches
            first.stop()
            stopped.set()

    wait_done(first, stop_once_started)
    assert 0 < len(values) < EVENTS, "the stop came before the first or after the last batch: nothing was tested"
    assert values == list(range(len(values)))
    later = worker_for(run_dir, values)  # `rltrack sync`, on its own thread
    later.run_until_caught_up("finished")
    assert values == list(range(EVENTS))
