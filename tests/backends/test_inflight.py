"""Several batches in flight, acknowledged in order (rltrack.trackers.inflight).

The pool's threads are real; what a batch "sends" is a function of the test
that waits for its turn, so the order of the answers is the test's choice.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from rltrack.trackers.inflight import InFlight


def test_only_a_contiguous_prefix_of_answered_batches_counts_as_stored():
    gates = [threading.Event() for _ in range(4)]
    stored: list[int] = []
    flight = InFlight(ThreadPoolExecutor(4), 4)
    for index, gate in enumerate(gates):
        flight.submit(gate.wait, lambda index=index: stored.append(index))
    gates[2].set()
    gates[1].set()
    assert flight.collect() == 0  # the first is still out: nothing counts as stored yet
    gates[0].set()
    gates[3].set()
    assert flight.drain() == 4 and stored == [0, 1, 2, 3]


def test_a_failed_batch_is_raised_once_and_rewind_forgets_what_followed():
    def fail() -> None:
        raise ConnectionError("server down")

    release = threading.Event()
    flight = InFlight(ThreadPoolExecutor(4), 4)
    stored: list[int] = []
    flight.submit(lambda: None, lambda: stored.append(1))
    flight.submit(fail, lambda: stored.append(2))
    flight.submit(release.wait, lambda: stored.append(3))
    release.set()
    with pytest.raises(ConnectionError):
        flight.drain()
    with pytest.raises(RuntimeError, match="goes back to its cursor"):
        flight.submit(lambda: None, lambda: None)
    assert flight.rewind() and flight.acked == flight.sent == 1 and stored == [1]
    assert flight.submit(lambda: None, lambda: stored.append(4)) == 2 and flight.drain() == 2 and stored == [1, 4]
    assert not flight.rewind()


def test_at_most_limit_batches_are_out_at_once():
    out, most, lock = 0, 0, threading.Lock()

    def send() -> None:
        nonlocal out, most
        with lock:
            out += 1
            most = max(most, out)
        threading.Event().wait(0.01)
        with lock:
            out -= 1

    flight = InFlight(ThreadPoolExecutor(8), 3)
    for _ in range(20):
        flight.submit(send, lambda: None)
    assert flight.drain() == 20 and most <= 3
