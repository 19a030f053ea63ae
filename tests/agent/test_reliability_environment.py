"""A bad environment: an unwritable or vanishing run root, a full disk, a
tracker package that is not installed, a tracker nobody answers at.

What must hold: a clear error at start where the problem can be known at
start; otherwise training goes on, the problem is reported once on stderr
(not a line per record), and the journal keeps what it can.

The file systems are real: a read-only bind mount (as root, chmod would not
stop a write) and a 2 MB tmpfs; both are unmounted in teardown. The missing
package is really missing: the child runs without site-packages on its path,
seeing a copy of it (symlinks) without mlflow.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest

import rltrack
from rltrack.agent.files import agent_dir
from rltrack.core.events import Event
from rltrack.journal import JournalWriter, read_batch
from disks import fill, mount, tmpfs
from mlflow_server import free_port
from reliability_helpers import REPO, child_env, failing_since
from waiting import wait_until


@pytest.fixture
def bind_mount(tmp_path: Path) -> Iterator[Path]:
    """A directory bind-mounted onto itself, which a test can make read-only
    (`remount(target, "ro")`) and writable again."""
    source, target = tmp_path / "source", tmp_path / "mounted"
    source.mkdir()
    target.mkdir()
    mount("--bind", str(source), str(target))
    try:
        yield target
    finally:
        subprocess.run(["umount", "--lazy", str(target)], check=True)  # lazy: a file the logger failed to close may still be open


def remount(target: Path, mode: str) -> None:
    mount("-o", f"remount,bind,{mode}", str(target))


@pytest.fixture
def read_only_root(bind_mount: Path) -> Path:
    remount(bind_mount, "ro")
    return bind_mount


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "small", "2m") as disk:
        yield disk


@pytest.fixture
def three_mb_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "three", "3m") as disk:
        yield disk


def rltrack_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("rltrack:")]


def test_a_read_only_run_root_is_an_error_at_start(read_only_root: Path) -> None:
    with pytest.raises(OSError, match=str(read_only_root)):
        rltrack.make_logger({"run": {"root": str(read_only_root / "runs"), "name": "ro"}})


def test_a_file_where_the_run_root_should_be_is_an_error_at_start(tmp_path: Path) -> None:
    (tmp_path / "not_a_dir").write_text("")
    with pytest.raises(OSError, match="not_a_dir"):
        rltrack.make_logger({"run": {"root": str(tmp_path / "not_a_dir" / "runs"), "name": "x"}})


def test_a_run_directory_removed_mid_run_never_stops_training(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    logger = rltrack.make_logger({"run": {"root": str(tmp_path), "name": "vanishing"}})
    for i in range(200):
        logger.write({"x": float(i)}, step=i)
    logger.flush()
    shutil.rmtree(logger.run_dir)
    start = time.thread_time()  # the training thread's own CPU: what a busy machine's other work does not add to
    for i in range(200, 2200):
        logger.write({"x": float(i)}, step=i)
        if i % 100 == 0:
            logger.dump()
    assert time.thread_time() - start < 1  # 2,000 deque appends; the failing disk work is the pipeline thread's
    logger.log_checkpoint({"w": 1}, iteration=1)
    logger.close(timeout=10)
    lines = rltrack_lines(capfd.readouterr().err)
    assert 1 <= len(lines) <= 6, lines  # once per component that failed, not per record


@pytest.mark.slow  # 30 s: fills a small disk, frees it, fills it again
@pytest.mark.reliability
def test_a_full_disk_keeps_training_and_the_journal_keeps_what_fitted(small_disk: Path, capfd: pytest.CaptureFixture[str]) -> None:
    logger = rltrack.make_logger({"run": {"root": str(small_disk), "name": "full"}})
    padding = "p" * 200
    records = 20_000  # ~6 MB of journal, csv and text logs: three times the disk
    start = time.thread_time()
    for i in range(records):
        logger.write({"x": float(i)}, step=i, namespace="learner")
        if i % 1000 == 0:
            logger.log_text("note", padding, step=i)
            logger.dump()
    write_seconds = time.thread_time() - start  # the training thread's CPU
    assert logger.close(timeout=30) is False  # returns (never raises) and says not everything could be written
    lines = rltrack_lines(capfd.readouterr().err)
    assert 1 <= len(lines) <= 6, lines
    kept = [e.data["x"] for e in rltrack.read_journal(logger.run_dir) if e.kind == "scalars"]
    assert 0 < len(kept) < records and kept == [float(i) for i in range(len(kept))]  # a prefix, nothing torn mid-file
    assert write_seconds < 2  # 20,000 deque appends (~1 us each); the full disk is the pipeline thread's


class Said:
    """What the process has printed on stderr so far, read as it comes."""

    def __init__(self, capfd: pytest.CaptureFixture[str]) -> None:
        self.capfd = capfd
        self.text = ""

    def all(self) -> str:
        self.text += self.capfd.readouterr().err
        return self.text

    def has(self, part: str) -> bool:
        return part in self.all()


@pytest.mark.reliability
def test_a_disk_full_for_a_while_loses_nothing_written_while_space_existed(three_mb_disk: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The issue's steps on a 3 MB tmpfs: 1,000 values, the disk filled by
    another file, 1,000 more, the space freed, 1,000 more. Before, the line
    being written when the disk filled stayed torn in the middle of the
    journal, the agent died on it again and again (progress.csv got none of
    the values) and the first value after space came back was lost."""
    logger = rltrack.make_logger({"run": {"root": str(three_mb_disk), "name": "full"}, "backends": {"use": ["local"]}})
    for i in range(1000):
        logger.write({"x": float(i)}, step=i)
    assert logger.flush(timeout=120)
    filler = fill(three_mb_disk)
    for i in range(1000, 2000):
        logger.write({"x": float(i)}, step=i)
    wait_until(lambda: any("No space left" in reason for reason in logger.report.as_dict()["counts"].get("core.errors", {})), 120, "the journal to meet the full disk")
    filler.unlink()
    for i in range(2000, 3000):
        logger.write({"x": float(i)}, step=i)
    closed = logger.close(timeout=120)
    lines = (logger.run_dir / "journal.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b""  # ends with a whole line
    journaled = [entry["data"]["x"] for entry in map(json.loads, lines[:-1]) if entry.get("kind") == "scalars"]  # no torn line anywhere
    assert journaled == [float(i) for i in range(3000)]  # the lines the disk refused were kept and written once it took them
    assert closed
    assert pd.read_csv(logger.run_dir / "progress.csv")["x"].tolist() == journaled
    said = rltrack_lines(capfd.readouterr().err)
    assert any("No space left on device" in line for line in said) and len(said) <= 6, said
    refused = sum(logger.report.as_dict()["counts"]["core.errors"].values())
    print(f"\ndisk full: {len(journaled)} of 3000 values journaled and in progress.csv; the journal's flush refused {refused} times; stderr: {said}")


@pytest.mark.reliability
def test_a_line_the_full_disk_cut_short_is_cut_back_and_written_whole_when_space_returns(three_mb_disk: Path) -> None:
    path = three_mb_disk / "journal.jsonl"
    writer = JournalWriter(path)
    filler = fill(three_mb_disk)
    os.truncate(filler, filler.stat().st_size - 10_000)  # a few pages free: part of what comes next fits
    events = [Event(float(i), {"x": float(i), "pad": "p" * 300}, steps={"step": i}) for i in range(100)]
    writer.append(events)
    with pytest.raises(OSError) as refused:
        writer.flush()
    assert refused.value.errno == errno.ENOSPC
    held = path.read_bytes()
    assert 0 < len(held) and not held.endswith(b"\n")  # the disk took part of a line: torn at the end, where readers wait for it
    assert read_batch(path, 0, 1000)[1] == held.rfind(b"\n") + 1
    filler.unlink()
    writer.append([Event(100.0, {"x": 100.0}, steps={"step": 100})])  # the first value after space returns
    writer.close()
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and [json.loads(line)["data"]["x"] for line in lines[:-1]] == [float(i) for i in range(101)]
    assert writer.lost == 0


MISSING_MLFLOW = textwrap.dedent(
    """
    import sys
    sys.path[:] = [p for p in sys.path if "site-packages" not in p] + sys.argv[1:3]
    import rltrack
    try:
        rltrack.make_logger({"run": {"root": "runs", "name": "x"}, "backends": {"use": ["local", "mlflow"]}})
    except rltrack.ConfigError as exc:
        print(exc)
    """
)


def test_a_missing_tracker_package_is_a_config_error_naming_the_extra(tmp_path: Path) -> None:
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    without = tmp_path / "site-packages"
    without.mkdir()
    for entry in site.iterdir():
        if not entry.name.lower().startswith("mlflow"):
            (without / entry.name).symlink_to(entry)
    done = subprocess.run(
        [sys.executable, "-S", "-c", MISSING_MLFLOW, str(without), str(REPO)],
        capture_output=True, text=True, env=child_env(tmp_path), cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "backends.mlflow" in done.stdout and "pip install 'rltrack[mlflow]'" in done.stdout, done.stdout
    assert not (tmp_path / "runs").exists()


def test_an_unreachable_tracker_is_reported_once_and_never_slows_training(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    logger = rltrack.make_logger({"run": {"root": str(tmp_path), "name": "nobody"}, "backends": {"use": ["local", "mlflow"], "mlflow": {"tracking_uri": uri}}})
    start = time.thread_time()
    for i in range(3000):
        logger.write({"x": float(i)}, step=i)
    training = time.thread_time() - start  # the training thread's CPU
    status = agent_dir() / "status.json"  # what `rltrack status` shows: the agent has met the error (a loaded machine starts it slowly)
    wait_until(lambda: status.is_file() and "not reachable" in status.read_text(), 120, "the agent to try MLflow")
    assert logger.close(timeout=3) is False  # how soon: bench/bench_outage.py
    assert training < 1  # 3,000 deque appends (~1 us each)
    lines = rltrack_lines(capfd.readouterr().err)
    assert len(lines) == 1 and f"rltrack sync {logger.run_dir} --to mlflow" in lines[0] and "not reachable" in lines[0], lines
    assert len(list(rltrack.read_journal(logger.run_dir))) == 3000
    assert os.path.getsize(logger.run_dir / "journal.jsonl") > 0


def test_an_error_that_cannot_heal_is_told_once_while_training_runs_and_not_retried(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A PostgreSQL tracking URI where no PostgreSQL driver is installed: the
    URI is well formed (make_logger takes it), and MLflow cannot open the
    store however often it is asked. Before, nothing was said until close,
    whose message said the agent goes on delivering, and the agent retried
    for 5 minutes."""
    pytest.importorskip("mlflow")
    if importlib.util.find_spec("psycopg") or importlib.util.find_spec("psycopg2"):
        pytest.skip("a PostgreSQL driver is installed here")
    cfg = {"run": {"root": str(tmp_path), "name": "pg", "close_timeout": 120}, "backends": {"use": ["local", "mlflow"], "mlflow": {"tracking_uri": "postgresql://rltrack@127.0.0.1:1/none"}}}
    logger = rltrack.make_logger(cfg)
    said = Said(capfd)
    for i in range(100):
        logger.write({"x": float(i)}, step=i)
    wait_until(lambda: said.has("retrying cannot help"), 120, "the error to be told while training runs")
    for i in range(100, 200):
        logger.write({"x": float(i)}, step=i)
    assert logger.close() is False
    lines = rltrack_lines(said.all())
    (during,) = [line for line in lines if "retrying cannot help" in line]
    assert "mlflow refuses" in during and "No module named" in during and f"rltrack sync {logger.run_dir} --to mlflow" in during
    (closing,) = [line for line in lines if "at close" in line or "not delivered" in line]
    assert "not delivered" in closing and "No module named" not in closing, closing  # the agent gave up at the end; the error is not said twice
    report = json.loads((logger.run_dir / "report.json").read_text())["counts"]
    assert sum(report["mlflow.errors"].values()) == 1  # one attempt: not retried within the run
    assert "mlflow.pending" in report


def test_a_wandb_dir_that_is_not_writable_is_said_and_nothing_goes_to_the_temp_directory(bind_mount: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """W&B falls back without a word to /tmp/wandb (readable by every user)
    when its directory is not writable: `close` said True, report.json and
    stderr nothing, sync "nothing pending", and the README's `wandb sync`
    never looked there (issue 27). Now: refused at `make_logger` when it can
    be seen then; otherwise told while training runs, the values kept in the
    journal, and `rltrack sync` delivers them once the directory is fixed."""
    wandb_reader = pytest.importorskip("wandb_reader")
    temp = Path(tempfile.gettempdir()) / "wandb"
    before = set(temp.glob("offline-run-*")) if temp.is_dir() else set()
    remount(bind_mount, "ro")
    cfg = {"run": {"root": str(bind_mount.parent / "runs"), "name": "w"}, "backends": {"use": ["local", "wandb"], "wandb": {"dir": str(bind_mount / "wandb_files")}}}
    with pytest.raises(rltrack.ConfigError, match="is not writable"):
        rltrack.make_logger(cfg)
    remount(bind_mount, "rw")
    logger = rltrack.make_logger(cfg)
    remount(bind_mount, "ro")  # read-only by the time the agent starts the W&B run
    said = Said(capfd)
    for i in range(100):
        logger.write({"x": float(i)}, step=i)
    wait_until(lambda: said.has("is not writable"), 120, "the W&B directory to be said not writable")  # by the agent opening W&B, or by its first delivery
    assert logger.close() is False
    lines = rltrack_lines(said.all())
    assert len([line for line in lines if "is not writable" in line]) == 1, lines
    (closing,) = [line for line in lines if "not delivered" in line or "not done" in line]
    assert f"rltrack sync {logger.run_dir} --to wandb" in closing, closing
    assert (set(temp.glob("offline-run-*")) if temp.is_dir() else set()) == before  # nothing went to the temporary directory
    remount(bind_mount, "rw")
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "sync", str(logger.run_dir), "--to", "wandb"], capture_output=True, text=True,
                          env=child_env(bind_mount.parent), cwd=REPO, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    files = wandb_reader.run_files(bind_mount / "wandb_files")
    assert [row["x"] for f in files for row in wandb_reader.history(f)] == [float(i) for i in range(100)]


def test_a_tracker_down_for_a_while_is_told_once_while_training_runs(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A server that does not answer: retried with backoff (it may come
    back), and said once on stderr after `TELL_FAILING_AFTER` seconds of
    training; before, nothing was said until close (issue 27)."""
    pytest.importorskip("mlflow")
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    logger = rltrack.make_logger({"run": {"root": str(tmp_path), "name": "down"}, "backends": {"use": ["local", "mlflow"], "mlflow": {"tracking_uri": uri}}})
    said = Said(capfd)
    step = 0

    def training_says_it() -> bool:
        nonlocal step
        logger.write({"x": float(step)}, step=step)
        step += 1
        return said.has("has refused every batch")

    wait_until(training_says_it, 120, "a tracker down to be told")
    for i in range(step, step + 100):
        logger.write({"x": float(i)}, step=i)
    assert logger.close(timeout=1) is False
    lines = rltrack_lines(said.all())
    (during,) = [line for line in lines if "has refused every batch" in line]
    assert "mlflow" in during and "not reachable" in during and "retries with backoff" in during
    assert not any("retrying cannot help" in line for line in lines)  # it may come back: not an error that cannot heal


@pytest.mark.slow
def test_a_tracker_down_during_a_sweep_is_told_in_one_line_naming_the_runs_that_wait(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A sweep's driver holds a logger per trial: the outage is one line for
    the process, not one per trial (16 lines of ~480 characters before)."""
    pytest.importorskip("mlflow")
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    loggers = [
        rltrack.make_logger({"run": {"root": str(tmp_path), "name": f"trial_{i}"}, "backends": {"use": ["mlflow"], "mlflow": {"tracking_uri": uri}}})
        for i in range(3)
    ]
    said = Said(capfd)
    step = 0

    def training_says_it() -> bool:
        nonlocal step
        for logger in loggers:
            logger.write({"x": float(step)}, step=step)
        step += 1
        return said.has("has refused every batch")

    wait_until(training_says_it, 120, "a tracker down to be told")
    wait_until(lambda: all(failing_since(logger.run_dir, "mlflow") for logger in loggers), 60, "every trial's delivery to fail")
    for logger in loggers:
        logger.write({"x": float(step)}, step=step)
        assert logger.close(timeout=1, quiet=True) is False
    (during,) = [line for line in rltrack_lines(said.all()) if "has refused every batch" in line]
    assert "3 runs of this process" in during and "not reachable" in during, during
