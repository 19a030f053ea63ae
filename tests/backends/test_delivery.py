"""The delivery machinery: cursor, batches, retries, bounded backlog, close timeout.

`ListTracker` is a stand-in for a remote tracker, written for these tests: it
keeps what it is given in a list and can be told to refuse, which a real
tracker cannot be made to do on cue; it is stepped in this process, as
`rltrack sync` does. `stand_in_tracker.FileTracker` is its twin that the agent
runs in its own process. The real trackers are tested against their own
stores in their own test modules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import rltrack.delivery
from deliver import deliver_all
from stand_in_tracker import FileTracker, batches, received

from rltrack.backends.base import RunContext
from rltrack.backends.remote import RemoteBackend
from rltrack.config import make_logger
from rltrack.delivery import Cursor, DeliveryBusy, DeliveryWorker
from rltrack.events import Event
from rltrack.report import Report
from rltrack.rundir import create_run_dir


class ListTracker(RemoteBackend):
    name = "listtracker"
    max_batch = 7

    def __init__(self, failures: int = 0) -> None:
        self.received: list[Event] = []
        self.batches: list[int] = []
        self.failures = failures
        self.status: str | None = None

    def deliver(self, events: list[Event]) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("tracker down")
        self.batches.append(len(events))
        self.received.extend(events)

    def close(self, status: str) -> None:
        self.status = status


def logger_with(tmp_path, close_timeout=5.0, **settings):
    """A logger whose only backend is the stand-in tracker, run by the agent."""
    name = "stand_in_tracker:FileTracker"
    return make_logger({"run": {"root": str(tmp_path), "name": "run", "close_timeout": close_timeout},
                        "backends": {"use": [name], name: settings}})  # fmt: skip


def wait_until(condition, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_every_event_arrives_once_in_batches_and_cursor_is_saved(tmp_path):
    logger = logger_with(tmp_path, failures=2)
    for i in range(50):
        logger.write({"x": i}, step=i)
    assert logger.close(timeout=30)
    assert [e.data["x"] for e in received(logger.run_dir)] == list(range(50))
    assert max(batches(logger.run_dir)) <= FileTracker.max_batch
    assert (logger.run_dir / "filetracker.status").read_text() == "finished"
    cursor = json.loads((logger.run_dir / "cursors" / "filetracker.json").read_text())
    assert cursor["offset"] == (logger.run_dir / "journal.jsonl").stat().st_size
    assert cursor["delivered"] == 50
    report = json.loads((logger.run_dir / "report.json").read_text())
    assert sum(report["counts"]["filetracker.errors"].values()) == 2


def test_a_hanging_tracker_does_not_hold_close_past_its_timeout_and_is_delivered_afterwards(tmp_path, capfd):
    hang = tmp_path / "hang"
    hang.touch()
    logger = logger_with(tmp_path, hang_while=str(hang))
    for i in range(10):
        logger.write({"x": i}, step=i)
    start = time.monotonic()
    assert logger.close(timeout=1.0) is False
    assert time.monotonic() - start < 2.0
    err = capfd.readouterr().err
    assert f"rltrack sync {logger.run_dir} --to stand_in_tracker:FileTracker" in err and "the agent goes on delivering" in err
    report = json.loads((logger.run_dir / "report.json").read_text())
    assert "filetracker.pending" in report["counts"]
    hang.unlink()  # the tracker is back: the agent delivers the rest without anyone waiting
    assert wait_until(lambda: (logger.run_dir / "filetracker.status").is_file())
    assert [e.data["x"] for e in received(logger.run_dir)] == list(range(10))
    assert wait_until(lambda: "filetracker.pending" not in json.loads((logger.run_dir / "report.json").read_text())["counts"])


def test_a_new_worker_resumes_from_the_saved_cursor(tmp_path):
    run_dir = create_run_dir(tmp_path, "run")
    (run_dir / "journal.jsonl").write_text("".join(Event(1.0, {"x": i}, steps={"step": i}).to_json() + "\n" for i in range(20)))
    down = ListTracker(failures=1000)
    down.open(RunContext(run_dir, "run", {}, Report()))
    worker = DeliveryWorker(down, run_dir)
    for _ in range(3):
        worker.next_try = 0.0
        worker.step()
    worker.give_up()
    assert Cursor(run_dir, "listtracker").offset == 0
    fresh = ListTracker()
    fresh.open(RunContext(run_dir, "run", {}, Report()))
    deliver_all(DeliveryWorker(fresh, run_dir), "finished")
    assert [e.data["x"] for e in fresh.received] == list(range(20))
    again = ListTracker()
    again.open(RunContext(run_dir, "run", {}, Report()))
    deliver_all(DeliveryWorker(again, run_dir), "finished")
    assert again.received == []  # nothing delivered twice



class SlowTracker(ListTracker):
    """Takes every batch, each after `delay` seconds: healthy, only slow."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def deliver(self, events: list[Event]) -> None:
        time.sleep(self.delay)
        super().deliver(events)


def test_sync_gives_up_a_tracker_that_keeps_failing_but_not_one_that_is_slow(tmp_path):
    """`run_until_caught_up(give_up_after=T)` (rltrack sync --timeout) uses
    the agent's rule: a tracker refusing every batch for T seconds is left,
    one that takes batches is served to the end however long it takes."""
    run_dir = create_run_dir(tmp_path, "run")
    (run_dir / "journal.jsonl").write_text("".join(Event(1.0, {"x": i}, steps={"step": i}).to_json() + "\n" for i in range(60)))
    slow = SlowTracker(delay=0.1)  # 9 batches of 7: about 0.9 s, past the 0.3 s limit
    slow.open(RunContext(run_dir, "run", {}, Report()))
    worker = DeliveryWorker(slow, run_dir)
    worker.run_until_caught_up("finished", give_up_after=0.3)
    assert [e.data["x"] for e in slow.received] == list(range(60)) and slow.status == "finished" and worker.caught_up()
    (run_dir / "cursors" / "listtracker.json").unlink()
    down = ListTracker(failures=10**6)
    down.open(RunContext(run_dir, "run", {}, Report()))
    worker = DeliveryWorker(down, run_dir)
    started = time.monotonic()
    worker.run_until_caught_up("finished", give_up_after=0.3)
    assert down.received == [] and not worker.caught_up() and worker.failing_longer_than(0.3)
    assert time.monotonic() - started < 30  # (no timing target: without the limit this call never returns)

def test_the_last_lines_are_delivered_when_the_journal_completes_after_an_empty_read(tmp_path):
    """The worker reads an empty journal; then the journal gets its last line
    and is marked complete: the next step must read once more before ending."""
    tracker = ListTracker()
    run_dir = create_run_dir(tmp_path, "race")
    tracker.open(RunContext(run_dir, "race", {}, Report()))
    worker = DeliveryWorker(tracker, run_dir)
    journal = run_dir / "journal.jsonl"
    journal.touch()
    assert worker.step() is False and not worker.done
    journal.write_text(Event(1.0, {"x": 1}).to_json() + "\n")
    worker.journal_complete = True
    while not worker.done:
        worker.step()
    assert [e.data for e in tracker.received] == [{"x": 1}]
    assert tracker.status == "finished"


class LateStoringTracker(ListTracker):
    """A stand-in for a tracker that takes rows before it stores them (as W&B
    hands rows to its writer process): `rows` is its run, of which the first
    `stored` are safe; the rest would be lost with the process. Delivery that
    continues from a cursor skips the rows the run holds beyond it. A real
    W&B run cannot be held at a chosen point between taking and storing; the
    SIGKILL test in test_reliability_crash.py covers the real one."""

    def __init__(self, rows: list[int] | None = None) -> None:
        super().__init__()
        self.rows = list(rows or [])
        self.stored = len(self.rows)
        self.skip = 0
        self.continued_from: list[int | None] = []

    def deliver(self, events: list[Event]) -> None:
        for event in events:
            if self.skip:
                self.skip -= 1
            else:
                self.rows.append(event.data["x"])

    def position(self) -> int:
        return len(self.rows)

    def durable_position(self) -> int:
        return self.stored

    def continue_from(self, position: int | None) -> None:
        self.continued_from.append(position)
        self.skip = len(self.rows) - (position or 0)

    def close(self, status: str) -> None:
        self.stored = len(self.rows)
        super().close(status)


def test_the_cursor_advances_only_over_what_the_tracker_has_stored(tmp_path):
    run_dir = create_run_dir(tmp_path, "late")
    journal = run_dir / "journal.jsonl"
    journal.write_text("".join(Event(1.0, {"x": i}, steps={"step": i}).to_json() + "\n" for i in range(20)))
    first = LateStoringTracker()
    first.open(RunContext(run_dir, "late", {}, Report()))
    worker = DeliveryWorker(first, run_dir)
    while worker.step():
        pass
    assert first.rows == list(range(20))  # three batches (7, 7, 6) taken, none stored
    assert (Cursor(run_dir, "listtracker").offset, Cursor(run_dir, "listtracker").position) == (0, 0)
    first.stored = 9  # the tracker stores the first batch and part of the second
    worker.step()  # an idle step looks again
    cursor = Cursor(run_dir, "listtracker")
    assert (cursor.delivered, cursor.position) == (7, 7)
    assert cursor.offset == len("".join(journal.read_text().splitlines(keepends=True)[:7]))
    worker.give_up()  # the process dies here: rows 7 and 8 are stored beyond the cursor, 9..19 are lost
    second = LateStoringTracker(rows=first.rows[: first.stored])
    second.open(RunContext(run_dir, "late", {}, Report()))
    deliver_all(DeliveryWorker(second, run_dir), "failed")
    assert second.continued_from == [7]
    assert second.rows == list(range(20))  # each row once: 7 and 8 skipped, 9..19 sent again
    assert Cursor(run_dir, "listtracker").delivered == 20 and second.status == "failed"


HOLDER = (
    "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); "
    "print('held', flush=True); time.sleep(float(sys.argv[2]))"
)


def test_a_delivery_waits_for_another_process_delivering_the_same_cursor(tmp_path, monkeypatch):
    """The agent may still be finishing a crashed run when `rltrack sync`
    starts: the second delivery waits until the first process lets go (its
    lock ends with it), and gives up with a clear error if it never does."""
    run_dir = create_run_dir(tmp_path, "busy")
    tracker = ListTracker()
    tracker.open(RunContext(run_dir, "busy", {}, Report()))
    lock = Cursor(run_dir, "listtracker").path.with_suffix(".lock")
    lock.parent.mkdir(exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), "1.5"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    start = time.monotonic()
    deliver_all(DeliveryWorker(tracker, run_dir), "finished")
    assert time.monotonic() - start > 1.0  # it waited for the holder to end
    assert holder.wait(10) == 0
    monkeypatch.setattr(rltrack.delivery, "LOCK_WAIT", 0.3)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(DeliveryBusy, match="another process has been delivering to this tracker"):
            DeliveryWorker(tracker, run_dir)
    finally:
        holder.kill()
        holder.wait()


def test_a_damaged_line_in_the_middle_of_a_journal_is_skipped_and_counted_by_the_agent(tmp_path):
    """The agent died on a line it could not parse (`JSONDecodeError`), was
    started again and died again: nothing after the line was delivered (issue 27)."""
    name = "stand_in_tracker:FileTracker"
    logger = make_logger({"run": {"root": str(tmp_path), "name": "run"}, "backends": {"use": ["local", name], name: {}}})
    for i in range(10):
        logger.write({"x": float(i)}, step=i)
    assert logger.flush(timeout=60)
    with (logger.run_dir / "journal.jsonl").open("a") as f:
        f.write('{"schema": 1, "time": 12\n')  # what something other than rltrack left in the file
    for i in range(10, 20):
        logger.write({"x": float(i)}, step=i)
    assert logger.close(timeout=60)
    assert [e.data["x"] for e in received(logger.run_dir)] == [float(i) for i in range(20)]
    assert [line.split(",")[-1] for line in (logger.run_dir / "progress.csv").read_text().splitlines()[1:]] == [str(float(i)) for i in range(20)]
    counts = json.loads((logger.run_dir / "report.json").read_text())["counts"]
    skipped = {"journal.jsonl: lines that are not journal lines, skipped": 1}
    assert counts["filetracker.unparsable"] == skipped and counts["files.unparsable"] == skipped, counts


def test_a_run_whose_journal_cannot_be_read_does_not_stop_the_agent_serving_the_others(tmp_path, capfd, monkeypatch):
    """An exception serving one run ended the agent (of every run); the next
    logger started another, which died on the same run: the other runs' local
    files were written anew by each new agent, and nothing was said. The
    agent gives the run up `RLTRACK_AGENT_RETRY` after its end, and exits
    once idle (it served it for ever otherwise)."""
    from rltrack.agent_files import LOCK, agent_dir
    from rltrack.locks import hold

    monkeypatch.setenv("RLTRACK_AGENT_DIR", str(tmp_path / "agent"))  # an agent of its own, quick to give up and to exit
    monkeypatch.setenv("RLTRACK_AGENT_RETRY", "1")
    monkeypatch.setenv("RLTRACK_AGENT_IDLE", "1")
    broken = make_logger({"run": {"root": str(tmp_path), "name": "broken"}, "backends": {"use": ["local"]}})
    healthy = make_logger({"run": {"root": str(tmp_path), "name": "healthy"}, "backends": {"use": ["local"]}})
    broken.write({"x": 0.0}, step=0)
    assert broken.flush(timeout=60)
    journal = broken.run_dir / "journal.jsonl"
    journal.unlink()
    journal.mkdir()  # what the agent reads next is a directory: IsADirectoryError
    (journal / "pad").write_bytes(b"x" * 10_000)
    broken.write({"x": 1.0}, step=1)
    said = ""
    deadline = time.monotonic() + 120
    while "agent.serve" not in said:
        assert time.monotonic() < deadline, f"the agent's error was not told in 120 s: {said}"
        healthy.write({"x": 1.0}, step=1)
        time.sleep(0.05)
        said += capfd.readouterr().err
    for i in range(200):
        healthy.write({"y": float(i)}, step=i)
    assert healthy.close(timeout=60)
    assert broken.close(timeout=1) is False
    said += capfd.readouterr().err
    assert said.count("agent.serve: IsADirectoryError") == 1, said
    counts = json.loads((healthy.run_dir / "report.json").read_text())["counts"]
    assert "files.rebuilt" not in counts  # one agent wrote them from start to end
    assert [line.split(",")[-1] for line in (healthy.run_dir / "progress.csv").read_text().splitlines()[-200:]] == [str(float(i)) for i in range(200)]
    lock = agent_dir() / LOCK
    assert wait_until(lambda: (fd := hold(lock, 0.0)) is not None and os.close(fd) is None, 120), "the agent still serves the broken run"
    errors = json.loads((broken.run_dir / "report.json").read_text())["counts"]["core.errors"]
    assert any(reason.startswith("agent.serve: IsADirectoryError") for reason in errors)  # the agent's counts reached report.json when it gave up


def test_a_skipped_line_is_counted_once_however_often_its_batch_is_retried(tmp_path):
    run_dir = create_run_dir(tmp_path, "run")
    lines = [Event(1.0, {"x": i}, steps={"step": i}).to_json() for i in range(10)]
    (run_dir / "journal.jsonl").write_text("\n".join(lines[:5] + ["{damaged"] + lines[5:]) + "\n")
    report = Report()
    flaky = ListTracker(failures=3)
    flaky.open(RunContext(run_dir, "run", {}, report))
    worker = DeliveryWorker(flaky, run_dir)
    while not worker.done:
        worker.next_try = 0.0  # no backoff wait in a test
        worker.step()
        if worker.caught_up():
            worker.journal_complete = True
    assert [e.data["x"] for e in flaky.received] == list(range(10))
    assert Cursor(run_dir, "listtracker").report.as_dict()["counts"]["listtracker.unparsable"] == {"journal.jsonl: lines that are not journal lines, skipped": 1}
