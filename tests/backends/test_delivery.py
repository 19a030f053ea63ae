"""The delivery machinery: cursor, batches, retries, bounded backlog, close timeout.

`ListTracker` is a stand-in for a remote tracker, written for these tests: it
keeps what it is given in a list and can be told to refuse, which a real
tracker cannot be made to do on cue; it is stepped in this process, as
`rltrack sync` does. `stand_in_tracker.FileTracker` is its twin that the agent
runs in its own process. The real trackers are tested against their own
stores in their own test modules.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

import rltrack.core.locks
import rltrack.delivery.worker
import rltrack.journal
from deliver import deliver_all
from stand_in_tracker import FileTracker, batches, received
from reliability_helpers import STALL, delivery_progress
from waiting import wait_until, wait_while_advancing

from rltrack.sinks.base import RunContext
from rltrack.trackers.remote import EventId, Lines, Progress, RemoteBackend, Rules
from rltrack.training.config import make_logger
from rltrack.delivery.cursor import Cursor, DeliveryBusy
from rltrack.delivery.worker import DeliveryWorker
from rltrack.core.events import Event
from rltrack.journal.feed import JournalFeed
from rltrack.core.report import Report
from rltrack.sinks.rundir import create_run_dir


class ListTracker(RemoteBackend):
    name = "listtracker"
    rules = Rules(max_batch=7)

    def __init__(self, failures: int = 0) -> None:
        self.received: list[Event] = []
        self.batches: list[int] = []
        self.failures = failures
        self.status: str | None = None

    def deliver(self, events: list[Event], ids: list[EventId]) -> None:
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


def test_every_event_arrives_once_in_batches_and_cursor_is_saved(tmp_path):
    logger = logger_with(tmp_path, failures=2)
    for i in range(50):
        logger.write({"x": i}, step=i)
    assert logger.close(timeout=30)
    assert [e.data["x"] for e in received(logger.run_dir)] == list(range(50))
    assert max(batches(logger.run_dir)) <= FileTracker.rules.max_batch
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
    assert logger.close(timeout=1.0) is False  # returned while the stand-in tracker still hangs (until `hang` goes)
    err = capfd.readouterr().err
    assert f"rltrack sync {logger.run_dir} --to stand_in_tracker:FileTracker" in err and "the agent goes on delivering" in err
    progress = lambda: delivery_progress(logger.run_dir.parent)  # noqa: E731 - the agent is slow beside busy loops, not stuck
    wait_while_advancing(lambda: "filetracker.pending" in report_counts(logger.run_dir), progress, STALL, "report.json to say filetracker.pending")
    hang.unlink()  # the tracker is back: the agent delivers the rest without anyone waiting
    wait_while_advancing(lambda: (logger.run_dir / "filetracker.status").is_file(), progress, STALL, "the stand-in tracker's run to end")
    assert [e.data["x"] for e in received(logger.run_dir)] == list(range(10))
    wait_while_advancing(lambda: "filetracker.pending" not in report_counts(logger.run_dir), progress, STALL, "report.json to drop filetracker.pending")


def report_counts(run_dir) -> dict[str, Any]:
    """report.json's counts; none before the agent first writes it (it does once it has read the journal to its end)."""
    report = run_dir / "report.json"
    return json.loads(report.read_text())["counts"] if report.is_file() else {}


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

    def deliver(self, events: list[Event], ids: list[EventId]) -> None:
        time.sleep(self.delay)
        super().deliver(events, ids)


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
    worker.run_until_caught_up("finished", give_up_after=0.3)  # without the limit this call never returns
    assert down.received == [] and not worker.caught_up() and worker.failing_longer_than(0.3)

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

    rules = Rules(max_batch=7, stores_later=True)

    def deliver(self, events: list[Event], ids: list[EventId], *, lines: Lines | None = None, store_now: bool = False) -> Progress:
        for event in events:
            if self.skip:
                self.skip -= 1
            else:
                self.rows.append(event.data["x"])
        return Progress(len(self.rows), self.stored)

    def resume(self, position: int | None, state: dict[str, Any]) -> Progress:
        super().resume(position, state)
        self.continued_from.append(position)
        self.skip = 0 if position is None else len(self.rows) - position
        return Progress(len(self.rows), self.stored)

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


class RunMakingTracker(LateStoringTracker):
    """Makes a run of its own on its first batch (its id in `state`, as every
    real tracker does) and stores nothing until told: a process killed then
    has a tracker run and no cursor past it."""

    def deliver(self, events: list[Event], ids: list[EventId], **delivery: Any) -> Progress:
        self.state = self.state or {"run": f"made by {id(self)}"}
        self.ids = getattr(self, "ids", []) + ids
        return super().deliver(events, ids, **delivery)


def test_the_trackers_state_is_saved_as_soon_as_it_changes_and_handed_back_with_the_ids(tmp_path):
    run_dir = create_run_dir(tmp_path, "state")
    lines = [Event(1.0, {"x": i}, steps={"step": i}).to_json() + "\n" for i in range(10)]
    (run_dir / "journal.jsonl").write_text("".join(lines))
    first = RunMakingTracker()
    first.open(RunContext(run_dir, "state", {}, Report()))
    worker = DeliveryWorker(first, run_dir)
    worker.step()
    assert first.ids == [EventId(None, sum(map(len, lines[: i + 1]))) for i in range(7)]  # (writer, byte offset after the line)
    worker.give_up()  # killed before the tracker stored anything
    assert (Cursor(run_dir, "listtracker").offset, Cursor(run_dir, "listtracker").state) == (0, first.state)
    second = RunMakingTracker(rows=first.rows[: first.stored])
    second.open(RunContext(run_dir, "state", {}, Report()))
    deliver_all(DeliveryWorker(second, run_dir), "finished")
    assert second.state == first.state and second.rows == list(range(10))  # the same tracker run, each row once


def test_a_writer_without_a_state_takes_the_newest_of_the_trackers_other_cursors(tmp_path):
    run_dir = create_run_dir(tmp_path, "writers")
    for writer in ("a", "b"):
        (run_dir / f"journal.{writer}.jsonl").write_text(Event(1.0, {"x": 1}).to_json() + "\n")
    Cursor(run_dir, "listtracker", "a").advance(0, 0, state={"run": "old"})
    Cursor(run_dir, "listtracker", "b").advance(0, 0, state={"run": "new"})
    os.utime(Cursor(run_dir, "listtracker", "b").path, ns=(0, Cursor(run_dir, "listtracker", "a").path.stat().st_mtime_ns + 10**9))
    for writer in ("c", "a"):  # c, new, takes b's (saved last); a keeps its own
        tracker = ListTracker()
        tracker.open(RunContext(run_dir, "writers", {}, Report()))
        (run_dir / f"journal.{writer}.jsonl").write_text(Event(1.0, {"x": 1}).to_json() + "\n")
        deliver_all(DeliveryWorker(tracker, run_dir, writer), "finished")
        assert tracker.state == {"run": "old" if writer == "a" else "new"} == Cursor(run_dir, "listtracker", writer).state


def test_a_cursor_folder_from_before_the_state_moved_into_the_cursor_continues_the_same_tracker_run(tmp_path):
    run_dir = create_run_dir(tmp_path, "old")
    (run_dir / "journal.jsonl").write_text("".join(Event(1.0, {"x": i}).to_json() + "\n" for i in range(3)))
    (run_dir / "cursors").mkdir()
    (run_dir / "cursors" / "listtracker.json").write_text(json.dumps({"offset": 0, "delivered": 0, "report": {}}))
    (run_dir / "cursors" / "listtracker_run.json").write_text(json.dumps({"run_id": "abc", "tracking_uri": "sqlite:///x.db"}))
    tracker = ListTracker()
    tracker.open(RunContext(run_dir, "old", {}, Report()))
    deliver_all(DeliveryWorker(tracker, run_dir), "finished")
    assert tracker.state == {"run_id": "abc", "tracking_uri": "sqlite:///x.db"} == json.loads((run_dir / "cursors" / "listtracker.json").read_text())["state"]


HOLDER = (  # holds the lock argv[1] for argv[2] seconds, then creates argv[3] and exits (which lets the lock go)
    "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); "
    "print('held', flush=True); time.sleep(float(sys.argv[2])); open(sys.argv[3], 'w').close()"
)


def test_a_delivery_waits_for_another_process_delivering_the_same_cursor(tmp_path):
    """The agent may still be finishing a crashed run when `rltrack sync`
    starts: the second delivery waits until the first process lets go (its
    lock ends with it)."""
    run_dir = create_run_dir(tmp_path, "busy")
    tracker = ListTracker()
    tracker.open(RunContext(run_dir, "busy", {}, Report()))
    lock = Cursor(run_dir, "listtracker").path.with_suffix(".lock")
    lock.parent.mkdir(exist_ok=True)
    released = tmp_path / "released"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), "1.5", str(released)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    told: list[str] = []
    deliver_all(DeliveryWorker(tracker, run_dir, waiting=lambda: told.append("waiting")), "finished")
    assert released.exists()  # it waited for the holder to be done
    assert told == ["waiting"]
    assert holder.wait(10) == 0


class HeldCursor:
    """The cursor lock of `run_dir`'s stand-in tracker held by another open
    file (`flock` locks of two opens exclude each other as two processes'
    do), and a stand-in for `time` in rltrack.core.locks whose every sleep
    lasts a second: on each, the holder saves its cursor (it makes progress)
    for `advancing` seconds, then lets the lock go after `release_after`
    seconds (None: never). Deterministic however loaded the machine is."""

    def __init__(self, run_dir, advancing: int, release_after: int | None) -> None:
        self.cursor = Cursor(run_dir, "listtracker")
        self.cursor.path.parent.mkdir(exist_ok=True)
        self.fd: int | None = os.open(self.cursor.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.now, self.advancing, self.release_after = 0.0, advancing, release_after

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += 1
        if self.now <= self.advancing:
            self.cursor.advance(self.cursor.offset + 1, 1)
        if self.release_after is not None and self.now >= self.release_after and self.fd is not None:
            os.close(self.fd)
            self.fd = None


def test_the_delivery_waits_while_the_holder_advances_and_gives_up_once_it_stalls(tmp_path, monkeypatch):
    """`LOCK_WAIT` bounds the time without progress, not the wait: a holder
    saving its cursor for 3 × LOCK_WAIT is waited for to its end; one that
    stops saving is given up on LOCK_WAIT seconds later, with what is pending."""
    run_dir = create_run_dir(tmp_path, "busy")
    journal_path = rltrack.journal.journal_path(run_dir)
    journal_path.write_text((json.dumps({"schema": 1}) + "\n") * 100)
    tracker = ListTracker()
    tracker.open(RunContext(run_dir, "busy", {}, Report()))
    monkeypatch.setattr(rltrack.delivery.worker, "LOCK_WAIT", 10.0)

    holder = HeldCursor(run_dir, advancing=30, release_after=31)
    monkeypatch.setattr(rltrack.core.locks, "time", holder)
    worker = DeliveryWorker(tracker, run_dir)
    assert holder.now == 31 and holder.fd is None  # taken once the holder let go, 21 s after LOCK_WAIT
    worker.give_up()

    holder = HeldCursor(run_dir, advancing=15, release_after=None)
    monkeypatch.setattr(rltrack.core.locks, "time", holder)
    pending = journal_path.stat().st_size - (holder.cursor.offset + 15)  # where the holder stops
    with pytest.raises(DeliveryBusy, match=f"has delivered nothing to this tracker for 10 s \\({pending:,} journal bytes pending\\)"):
        DeliveryWorker(tracker, run_dir)
    assert holder.now == 15 + 10  # the last save, then LOCK_WAIT without one
    os.close(holder.fd)


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
    from rltrack.agent.files import LOCK, agent_dir
    from rltrack.core.locks import hold

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

    def told() -> bool:
        nonlocal said
        healthy.write({"x": 1.0}, step=1)
        said += capfd.readouterr().err
        return "agent.serve" in said

    wait_until(told, 120, lambda: f"the agent's error to be told: {said}")
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
    wait_until(lambda: (fd := hold(lock, 0.0)) is not None and os.close(fd) is None, 120, "the agent to give the broken run up and exit")
    errors = json.loads((broken.run_dir / "report.json").read_text())["counts"]["core.errors"]
    assert any(reason.startswith("agent.serve: IsADirectoryError") for reason in errors)  # the agent's counts reached report.json when it gave up


def step_to_the_end(worker: DeliveryWorker) -> None:
    """Steps `worker` on this thread until the whole journal is delivered, without backoff waits."""
    while not worker.done:
        worker.next_try = 0.0
        worker.step()
        if worker.caught_up():
            worker.journal_complete = True


def test_a_skipped_line_is_counted_once_however_often_its_batch_is_retried(tmp_path):
    run_dir = create_run_dir(tmp_path, "run")
    lines = [Event(1.0, {"x": i}, steps={"step": i}).to_json() for i in range(10)]
    (run_dir / "journal.jsonl").write_text("\n".join(lines[:5] + ["{damaged"] + lines[5:]) + "\n")
    report = Report()
    flaky = ListTracker(failures=3)
    flaky.open(RunContext(run_dir, "run", {}, report))
    worker = DeliveryWorker(flaky, run_dir)
    step_to_the_end(worker)
    assert [e.data["x"] for e in flaky.received] == list(range(10))
    assert Cursor(run_dir, "listtracker").report.as_dict()["counts"]["listtracker.unparsable"] == {"journal.jsonl: lines that are not journal lines, skipped": 1}


class OtherTracker(ListTracker):
    name = "othertracker"


class ThirdTracker(ListTracker):
    name = "thirdtracker"


def test_a_journal_batch_is_parsed_once_for_every_caught_up_tracker_and_a_lagging_one_reads_its_backlog_itself(tmp_path, monkeypatch):
    """Issue 30: the agent parsed each journal line 1 + N times (the files,
    then each tracker). A `JournalFeed` parses each batch once and hands it
    to every worker that is caught up. A tracker whose thread is busy keeps
    2 batches (the 3rd is dropped and counted) and reads the rest from the
    journal; a tracker that is down keeps none and reads its whole backlog
    from the journal once it is back. Every tracker holds every value once,
    in order, with the damaged line counted in each."""
    run_dir = create_run_dir(tmp_path, "run")
    lines = [Event(1.0, {"x": i}, steps={"step": i}).to_json() for i in range(6000)]
    (run_dir / "journal.jsonl").write_text("\n".join(lines[:3500] + ["{damaged"] + lines[3500:]) + "\n")
    parsed = []
    parse_line = rltrack.journal.parse_line
    monkeypatch.setattr(rltrack.journal, "parse_line", lambda line: parsed.append(line) or parse_line(line))
    feed = JournalFeed(run_dir / "journal.jsonl", 0)
    trackers = up, busy, down = ListTracker(), OtherTracker(), ThirdTracker(failures=10**9)
    workers = []
    for tracker in trackers:
        tracker.open(RunContext(run_dir, "run", {}, Report()))
        workers.append(DeliveryWorker(tracker, run_dir, feed=feed))
    feed.consumers += workers

    def step(stepped: list[DeliveryWorker]) -> None:
        for _ in range(10_000):  # bounded: 6000 values in batches of 7 need under 900 steps each
            for worker in stepped:
                worker.next_try = 0.0  # no backoff wait in a test
            if not any([worker.step() for worker in stepped]):
                return
        raise AssertionError("the workers never went idle")

    assert feed.step(1000)
    assert not workers[2].step() and workers[2].failing_since is not None  # `down` refuses its first batch
    step(workers[:1])
    while feed.step(1000):  # 5 more batches, while `busy` is not stepped and `down` is failing
        step(workers[:1])
    assert len(up.received) == 6000 and not busy.received and not down.received
    assert [worker.inbox.dropped for worker in workers] == [0, 1, 0]
    down.failures = 0
    feed.complete = True
    for worker in workers:
        worker.journal_complete = True
    assert not feed.step(1000) and feed.ended
    step(workers)
    assert all(worker.done for worker in workers)
    for tracker in trackers:
        assert [e.data["x"] for e in tracker.received] == list(range(6000))
        assert tracker.status == "finished"
        counts = Cursor(run_dir, tracker.name).report.as_dict()["counts"]
        assert counts[f"{tracker.name}.unparsable"] == {"journal.jsonl: lines that are not journal lines, skipped": 1}
    # each line once by the feed (`up` parsed none), the 4 batches after its inbox's 2 again by `busy`, all again by `down`
    assert len(parsed) == 6001 + 4001 + 6001


class PickyTracker(ListTracker):
    """Refuses a whole batch that holds an event with key `bad` (as W&B
    refused a NUL byte in a media name: `ValueError: embedded null byte`),
    and is down for its first `failures` deliveries."""

    name = "pickytracker"
    rules = Rules(max_batch=16)

    def __init__(self, failures: int = 0) -> None:
        super().__init__(failures)
        self.calls = 0

    def deliver(self, events: list[Event], ids: list[EventId]) -> None:
        self.calls += 1
        if any("bad" in event.data for event in events):
            raise ValueError("embedded null byte")
        super().deliver(events, ids)


def test_a_batch_refused_for_its_data_is_split_down_to_the_refused_records_and_the_rest_delivered_in_order(tmp_path):
    run_dir = create_run_dir(tmp_path, "run")
    events = [Event(1.0, {"bad" if i in (5, 6, 40) else "x": i}, steps={"step": i}) for i in range(48)]
    (run_dir / "journal.jsonl").write_text("".join(event.to_json() + "\n" for event in events))
    ends = [len("".join(event.to_json() + "\n" for event in events[: i + 1]).encode()) for i in range(48)]
    picky = PickyTracker(failures=2)  # down first: that batch waits, it is not split
    picky.open(RunContext(run_dir, "run", {}, Report()))
    worker = DeliveryWorker(picky, run_dir)
    step_to_the_end(worker)
    assert [e.data["x"] for e in picky.received] == [i for i in range(48) if i not in (5, 6, 40)]
    counts = Cursor(run_dir, "pickytracker").report.as_dict()["counts"]
    assert counts["pickytracker.refused"] == {
        f"refused by pickytracker: ValueError: embedded null byte: journal.jsonl line ending at byte {ends[i]}": 1 for i in (5, 6, 40)
    }
    assert sum(counts["pickytracker.errors"].values()) == 2  # the outage, counted as errors; the refusals are not errors
    assert Cursor(run_dir, "pickytracker").delivered == 45
    assert picky.calls < 2 + 3 * 2 * 5  # three poisoned records in batches of 16: about 2·log2(16) calls each


def test_what_no_store_encodes_is_left_out_before_sending_and_counted_once_however_often_its_batch_is_retried(tmp_path):
    run_dir = create_run_dir(tmp_path, "run")
    events = [Event(1.0, {"x": i}, steps={"step": i}) for i in range(4)]
    events[1] = Event(1.0, {"t": "a\ud800b", "u": "fine"}, kind="text", steps={"step": 1})
    events[2] = Event(1.0, {"x": 2}, namespace="n\udfffs", steps={"step": 2})
    (run_dir / "journal.jsonl").write_text("".join(event.to_json() + "\n" for event in events))
    flaky = ListTracker(failures=3)
    flaky.open(RunContext(run_dir, "run", {}, Report()))
    worker = DeliveryWorker(flaky, run_dir)
    step_to_the_end(worker)
    assert [e.data for e in flaky.received] == [{"x": 0}, {"u": "fine"}, {"x": 3}]
    refused = Cursor(run_dir, "listtracker").report.as_dict()["counts"]["listtracker.refused"]
    assert sorted(refused.values()) == [1, 1] and all("lone surrogate" in reason for reason in refused)


def test_refused_values_beyond_the_first_hundred_are_counted_without_their_places(tmp_path):
    run_dir = create_run_dir(tmp_path, "run")
    events = [Event(1.0, {"t": "a\ud800b"}, kind="text", steps={"step": i}) for i in range(150)]
    (run_dir / "journal.jsonl").write_text("".join(event.to_json() + "\n" for event in events))
    tracker = ListTracker()
    tracker.open(RunContext(run_dir, "run", {}, Report()))
    step_to_the_end(DeliveryWorker(tracker, run_dir))
    refused = Cursor(run_dir, "listtracker").report.as_dict()["counts"]["listtracker.refused"]
    assert len(refused) == 101 and sum(refused.values()) == 150
    assert refused["text value: a lone surrogate (no UTF-8 form) in its key or value: in journal.jsonl, places beyond the first 100 not listed"] == 50
