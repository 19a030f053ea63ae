"""The storage mirror's delivery (rltrack.trackers.storage), stepped in this
process as `rltrack sync` steps it, to a shared directory (`file://`): a
write that fails after the store kept the object (a timeout), and a delivery
cut short and taken up by another process, write the same segment again,
never a second copy of a range. The store is real (pyarrow's local file
system); what fails is told by wrapping `Storage.put`, which a real store
cannot be made to do on cue.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from deliver import deliver_all
from rltrack.core.events import Event
from rltrack.core.report import Report
from rltrack.core.storage import Storage
from rltrack.delivery.cursor import Cursor
from rltrack.delivery.worker import DeliveryWorker
from rltrack.journal import JournalWriter, journal_path
from rltrack.journal.layout import chain, parse_segment
from rltrack.sinks.base import RunContext
from rltrack.sinks.rundir import create_run_dir
from rltrack.trackers.storage import StorageBackend

pytest.importorskip("pyarrow", reason="the storage extra (pyarrow) opens the store")


def append(run_dir: Path, start: int, count: int) -> int:
    writer = JournalWriter(journal_path(run_dir))
    writer.append(Event(time.time(), {"loss": float(i)}, steps={"step": i}) for i in range(start, start + count))
    writer.close()
    return journal_path(run_dir).stat().st_size


def mirror(store: Path, run_dir: Path) -> StorageBackend:
    backend = StorageBackend(store.as_uri(), "r", every=3600, segment_bytes=1)  # a segment per batch
    backend.open(RunContext(run_dir, "r", {}, Report()))
    return backend


def stored_segments(store: Path) -> list:
    return sorted(parse_segment(path.relative_to(store / "r").as_posix()) for path in (store / "r" / "journal").iterdir())


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return create_run_dir(tmp_path / "runs", "r")


def test_a_write_that_failed_after_the_store_kept_it_is_written_again_under_the_same_name(tmp_path, run_dir, monkeypatch) -> None:
    store = tmp_path / "store"
    first_end = append(run_dir, 0, 10)
    original = Storage.put
    writes: list[str] = []

    def put_then_time_out_once(self: Storage, relative: str, data: bytes) -> None:
        original(self, relative, data)
        writes.append(relative)
        if len(writes) == 1:
            raise TimeoutError("the store kept it, the answer never came")

    monkeypatch.setattr(Storage, "put", put_then_time_out_once)
    worker = DeliveryWorker(mirror(store, run_dir), run_dir)
    assert worker.step() is False and worker.errors == 1
    end = append(run_dir, 10, 10)  # more lines meanwhile: the retry must not make a segment [0, end)
    worker.next_try = 0.0
    deliver_all(worker, "finished")
    assert writes[:2] == [f"journal/{0:016d}-{first_end:016d}.jsonl"] * 2
    pieces = stored_segments(store)
    assert [(s.first, s.last) for s in pieces] == [(s.first, s.last) for s in chain(pieces)] and pieces[-1].last == end
    assert b"".join((store / "r" / s.path).read_bytes() for s in pieces) == journal_path(run_dir).read_bytes()


def test_a_delivery_cut_short_is_taken_up_by_the_next_process_with_the_same_segment(tmp_path, run_dir, monkeypatch) -> None:
    """The range is in the cursor before the write: a process killed during
    the write leaves it there, and the next writes exactly that range again."""
    store = tmp_path / "store"
    first_end = append(run_dir, 0, 10)
    original = Storage.put
    saved_before: list[object] = []

    def put_and_die(self: Storage, relative: str, data: bytes) -> None:
        saved_before.append(Cursor(run_dir, "storage").state.get("segments"))
        original(self, relative, data)
        raise SystemExit("killed during the write")  # not an Exception: nothing of the delivery's own runs after it

    monkeypatch.setattr(Storage, "put", put_and_die)
    first = DeliveryWorker(mirror(store, run_dir), run_dir)
    with pytest.raises(SystemExit):
        first.step()
    assert saved_before == [{"": [0, first_end]}]
    first.give_up()  # the kernel releases a killed process's lock
    monkeypatch.setattr(Storage, "put", original)
    end = append(run_dir, 10, 10)
    deliver_all(DeliveryWorker(mirror(store, run_dir), run_dir), "finished")
    pieces = stored_segments(store)
    assert [(s.first, s.last) for s in pieces] == [(0, first_end), (first_end, end)]
    assert b"".join((store / "r" / s.path).read_bytes() for s in pieces) == journal_path(run_dir).read_bytes()


def test_a_batch_offered_again_after_a_file_write_failed_is_not_stored_twice(tmp_path, run_dir, monkeypatch) -> None:
    """A batch completes a segment (with the lines gathered before it), the
    segment is written, then writing a new file fails: the delivery offers
    the batch again, and the mirror does not store its lines a second time."""
    store = tmp_path / "store"
    first_end = append(run_dir, 0, 10)
    original = Storage.put_file
    refusals = [0]

    def put_file_or_refuse(self: Storage, relative: str, local: Path) -> None:
        if refusals[0]:
            refusals[0] -= 1
            raise OSError("the store refused the file")
        original(self, relative, local)

    monkeypatch.setattr(Storage, "put_file", put_file_or_refuse)
    backend = StorageBackend(store.as_uri(), "r", every=3600, segment_bytes=first_end + 1)
    backend.open(RunContext(run_dir, "r", {}, Report()))
    worker = DeliveryWorker(backend, run_dir)
    assert worker.step() is True and not (store / "r" / "journal").exists()  # gathered, not yet a segment
    end = append(run_dir, 10, 10)
    (run_dir / "ckpt").mkdir()
    (run_dir / "ckpt" / "iteration_1.pth.tar").write_bytes(b"weights")
    os.utime(run_dir / "ckpt" / "iteration_1.pth.tar", (0, 0))  # unchanged for longer than `every`: settled
    refusals[0] = 1  # the next file write fails
    backend._files_at = float("-inf")  # the files are due at the next batch (the lines wait for segment_bytes)
    assert worker.step() is False and worker.errors == 1  # the segment [0, end) is written, the file is not
    worker.next_try = 0.0
    deliver_all(worker, "finished")
    assert [(s.first, s.last) for s in stored_segments(store)] == [(0, end)]
    assert (store / "r" / "ckpt" / "iteration_1.pth.tar").read_bytes() == b"weights"


def test_a_file_that_only_grows_costs_a_few_times_its_size_however_often_it_settles(tmp_path, run_dir, monkeypatch) -> None:
    """1,000 dumps of progress.csv, each settled before the mirror looks
    (longer than `every` apart, the costliest case): written again whole at
    each, it cost its final size ~500 times over; a file rewritten in place (a
    checkpoint) is still written each time it settles; at the end both are whole."""
    store = tmp_path / "store"
    written: dict[str, int] = {}
    original = Storage.put_file

    def counted(self: Storage, relative: str, local: Path) -> None:
        written[relative] = written.get(relative, 0) + local.stat().st_size
        original(self, relative, local)

    monkeypatch.setattr(Storage, "put_file", counted)
    backend = StorageBackend(store.as_uri(), "r", every=1.0)
    backend.open(RunContext(run_dir, "r", {}, Report()))
    progress, checkpoint = run_dir / "progress.csv", run_dir / "latest.pth"
    progress.write_text("step,loss\n")
    for step in range(1000):
        with progress.open("a") as f:
            f.write(f"{step},{1 / (step + 1):.12f}\n")
        changed = [progress]
        if step % 100 == 0:
            checkpoint.write_bytes(bytes([step % 256]) * (1000 + step))  # in place, a little larger each time
            changed.append(checkpoint)
        for path in changed:
            os.utime(path, (time.time() - 10, time.time() - 10))  # settled
        backend._files_at = float("-inf")  # the files are due now
        backend.deliver([], [])
    backend.deliver([], [], store_now=True)
    size = progress.stat().st_size
    assert (store / "r" / "progress.csv").read_bytes() == progress.read_bytes()
    assert (store / "r" / "latest.pth").read_bytes() == checkpoint.read_bytes()
    assert written["progress.csv"] <= 5 * size, f"{written['progress.csv']} bytes written for a file of {size}"
    assert written["latest.pth"] == sum(1000 + step for step in range(0, 1000, 100))  # each version once
