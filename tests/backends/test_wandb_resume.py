"""A W&B run continued by a later session stays one run with every `_step` once.

Why these tests: in offline mode each session (a resumed run, `rltrack sync`
after a crash, a second delivery) writes an offline folder of its own with
the same run id. W&B's sync appends a later folder's history lines to the
run and keeps their `_step` values (wandb-core moves them up only when they
start below the run's next step), so a folder whose `_step` restarts at 0
repeats steps the run already holds. Every session's `.wandb` file is read
back: taken oldest first, the files must hold `_step` 0, 1, 2, ... each once,
and every session after the first must ask W&B to resume the run (the run
record's `resume`). What wandb-core then uploads (`wandb sync` of the
folders, an online resume) is read back from a stand-in server
(wandb_server.py): one run, every step once.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
import wandb_reader
from deliver import deliver_all
from reliability_helpers import PYTHON, child_env, wandb_files, wandb_history
from test_wandb_backend import wandb_env  # noqa: F401 - the module's W&B directories, and offline mode
from wandb_server import WandbServer
from waiting import wait_until

import rltrack
from rltrack.sinks.base import RunContext
from rltrack.trackers.wandb.backend import WandbBackend
from rltrack.delivery.cursor import Cursor, tracker_state
from rltrack.delivery.worker import DeliveryWorker
from rltrack.core.events import Event
from rltrack.journal import JournalWriter
from rltrack.core.report import Report


def steps_and_values(files: list[Path], key: str) -> tuple[list[int], list[float]]:
    """`_step` of every history row of `files`, in order, and the value of `key` in each."""
    rows = [row for path in files for row in wandb_history(path)]
    return [row["_step"] for row in rows], [row[key] for row in rows]


def run_records(files: list[Path]) -> list[bool]:
    """The `resume` flag of the run record each file starts with."""
    return [next(r.run.resume for r in wandb_reader.records(path) if r.WhichOneof("record_type") == "run") for path in files]


def local_run(root: Path, name: str, rows: range) -> rltrack.Logger:
    logger = rltrack.make_logger({"run": {"root": str(root), "name": name}, "backends": {"use": ["local"]}})
    for step in rows:
        logger.write({"x": float(step)}, step={"env_steps": step}, namespace="a")
    logger.close()
    return logger


def append_rows(run_dir: Path, steps: range) -> None:
    """More rows in the run's journal, as a writer that goes on would add them."""
    journal = JournalWriter(run_dir / "journal.jsonl")
    journal.append(Event(time.time(), {"x": float(step)}, namespace="a", steps={"env_steps": step}) for step in steps)
    journal.close()


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> Path:
    """An offline run of 30 rows, resumed for 25 more: its run directory."""
    config = {
        "run": {"root": str(tmp_path_factory.mktemp("runs")), "name": "resumed", "close_timeout": None},  # a session ends once W&B has everything
        "backends": {"use": ["wandb"], "wandb": {"project": "rltrack-test"}},
    }
    run_dir = None
    for start, stop in ((0, 30), (30, 55)):
        with rltrack.make_logger(config, resume=run_dir) as logger:
            for step in range(start, stop):
                logger.write({"reward": float(step)}, step=step, namespace="learner")
        run_dir = logger.run_dir
    return run_dir


def test_a_resumed_run_continues_the_step_numbering_of_its_first_session(resumed):
    files = wandb_reader.run_files(resumed)
    assert len(files) == 2 and len({f.name for f in files}) == 1
    steps, rewards = steps_and_values(files, "learner/reward")
    assert steps == list(range(55))  # the second folder starts at 30, not 0
    assert rewards == [float(s) for s in range(55)]
    assert run_records(files) == [False, True]  # the first session starts the run, the second resumes it


@pytest.fixture
def server():
    server = WandbServer()
    yield server
    server.stop()


def wandb_sync(server: WandbServer, home: Path, *folders: Path) -> None:
    """`wandb sync FOLDER...` as a user runs it, against `server`."""
    env = {**child_env(home), "WANDB_MODE": "online", "WANDB_SILENT": "false", "WANDB_BASE_URL": server.url, "WANDB_API_KEY": "k" * 40}
    done = subprocess.run([PYTHON, "-m", "wandb", "sync", *map(str, folders)], capture_output=True, text=True, env=env, cwd=home, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and said.count("Finished syncing") == len(folders), said


def test_wandb_sync_of_the_folders_gives_one_run_with_every_step_once(resumed, server, tmp_path):
    """wandb-core's upload of the offline folders, in one command (which
    sorts them by start time) and one folder a command, newest first."""
    run_id = tracker_state(resumed, "wandb")["id"]
    folders = [f.parent for f in wandb_reader.run_files(resumed)]
    copies = [shutil.copytree(f, tmp_path / "newest_first" / f.name) for f in folders]  # wandb sync marks what it synced
    wandb_sync(server, tmp_path, *reversed(folders))
    history = server.history(run_id)
    assert [row["_step"] for row in history] == list(range(55))
    assert [row["learner/reward"] for row in history] == [float(s) for s in range(55)]

    later = WandbServer()
    try:
        for folder in reversed(copies):
            wandb_sync(later, tmp_path, folder)
        by_step = {row["_step"]: row["learner/reward"] for row in later.history(run_id)}
        assert len(later.history(run_id)) == 55 and by_step == {s: float(s) for s in range(55)}  # every step once, lines in upload order
    finally:
        later.stop()


def test_a_resumed_online_run_continues_its_steps(server, tmp_path, monkeypatch):
    import wandb

    # wandb-core, started once per process by an earlier test, keeps the
    # settings it started with (offline, no base URL): this test's online
    # runs then waited forever for api.wandb.ai. A service of its own, and
    # a fresh one for the tests after it.
    wandb.teardown()
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    logger = local_run(tmp_path, "online", range(30))
    context = RunContext(logger.run_dir, logger.name, logger.config, Report())
    try:
        for session in range(2):
            backend = WandbBackend(project="rltrack-test", mode="online")
            backend.open(context)
            deliver_all(DeliveryWorker(backend, logger.run_dir), "finished")
            if session == 0:
                append_rows(logger.run_dir, range(30, 55))
    finally:
        wandb.teardown()
    (run_id,) = server.runs
    assert [row["_step"] for row in server.history(run_id)] == list(range(55))
    assert [row["a/x"] for row in server.history(run_id)] == [float(s) for s in range(55)]
    assert [op for op, _ in server.operations if op == "RunResumeStatus"] == ["RunResumeStatus"]  # the second session resumed


def test_sessions_started_within_one_second_are_all_counted(tmp_path):
    """W&B names the folder of a session that starts within the same second
    as an earlier one of the run `offline-run-<time>-<id>-1` (`-2`, ...).
    Its rows count too, or the next session would log them again and number
    its own rows from too low a step. The plain names of the next two minutes
    are taken first, so that sessions two and three get such names."""
    logger = local_run(tmp_path, "quick", range(10))
    context = RunContext(logger.run_dir, logger.name, logger.config, Report())
    for session in range(3):
        backend = WandbBackend(project="rltrack-test")
        backend.open(context)
        deliver_all(DeliveryWorker(backend, logger.run_dir), "killed")
        if session == 0:
            run_id = tracker_state(logger.run_dir, "wandb")["id"]
            for second in range(-1, 120):
                stamp = datetime.fromtimestamp(time.time() + second).strftime("%Y%m%d_%H%M%S")  # as wandb names them
                (logger.run_dir / "wandb" / f"offline-run-{stamp}-{run_id}").mkdir(exist_ok=True)
        append_rows(logger.run_dir, range(10 + 5 * session, 15 + 5 * session))
    files = wandb_reader.run_files(logger.run_dir)
    assert len(files) == 3
    assert [f.parent.name.endswith(run_id) for f in files] == [True, False, False]  # `-1`, `-2` after the id
    steps, xs = steps_and_values(files, "a/x")
    assert steps == list(range(20)) and xs == [float(s) for s in range(20)]
    assert run_records(files) == [False, True, True]


def test_sync_after_the_delivering_process_is_killed_continues_the_step_numbering(tmp_path):
    """`rltrack sync --to wandb` (the agent's delivery code) is SIGKILLed
    mid-delivery, and a second `rltrack sync` delivers the rest: the killed
    session's file holds rows its cursor never acknowledged, the second file
    starts right after them, at the next `_step`."""
    rows = 6000
    run_dir = local_run(tmp_path / "runs", "killed", range(rows)).run_dir
    config = tmp_path / "wandb.toml"
    config.write_text('[backends.wandb]\nproject = "rltrack-test"\n')
    command = [PYTHON, "-m", "rltrack.cli", "sync", str(run_dir), "--to", "wandb", "--config", str(config)]
    env = child_env(tmp_path)
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:

        def stored() -> bool:
            assert child.poll() is None, child.stderr.read()
            return Cursor(run_dir, "wandb").delivered > 0

        wait_until(stored, 180, "W&B to store a batch", every=0.02)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    killed_at = Cursor(run_dir, "wandb").delivered
    assert 0 < killed_at < rows, "the sync ended before it could be killed"
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    files = wandb_files(run_dir)
    assert len(files) == 2 and len({f.name for f in files}) == 1
    first = len(wandb_history(files[0]))
    assert first >= killed_at
    steps, xs = steps_and_values(files, "a/x")
    assert steps == list(range(rows))  # the second file starts at `first`, where the killed one ended
    assert xs == [float(s) for s in range(rows)]
    assert [row["_step"] for row in wandb_history(files[1])][0] == first
    assert run_records(files[1:]) == [True]


#: The delivering process, killed inside its first batch: its W&B run was created and holds rows, and the batch never returned.
KILLED_INSIDE_THE_FIRST_BATCH = """
import os, sys, time
from rltrack.trackers.wandb import backend
from rltrack.cli.entry import main

log = backend.WandbBackend._log

def log_then_die(self, row):
    log(self, row)
    if self._position() == 300:  # wait until W&B's file holds rows, then die as SIGKILL would: no `finally` runs
        deadline = time.monotonic() + 300
        while self._file.count() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        os._exit(9)

backend.WandbBackend._log = log_then_die
sys.exit(main(sys.argv[1:]))
"""


def test_a_delivery_killed_inside_its_first_batch_is_continued_in_the_same_w_and_b_run(tmp_path):
    """The W&B run's id is in the cursor before its first row: a delivery
    killed after `wandb.init`, inside the batch that created the run, leaves
    rows in W&B's file and no batch acknowledged; the next delivery resumes
    that run and skips those rows (it once started another run and sent them again)."""
    rows = 900
    run_dir = local_run(tmp_path / "runs", "killed-early", range(rows)).run_dir
    config = tmp_path / "wandb.toml"
    config.write_text('[backends.wandb]\nproject = "rltrack-test"\n')
    arguments = ["sync", str(run_dir), "--to", "wandb", "--config", str(config)]
    env = child_env(tmp_path)
    killed = subprocess.run([PYTHON, "-c", KILLED_INSIDE_THE_FIRST_BATCH, *arguments], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert killed.returncode == 9, killed.stderr
    assert Cursor(run_dir, "wandb").delivered == 0 and Cursor(run_dir, "wandb").state["id"]
    done = subprocess.run([PYTHON, "-m", "rltrack.cli", *arguments], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    files = wandb_files(run_dir)
    assert len(files) == 2 and len({f.name for f in files}) == 1  # one W&B run, two sessions
    assert len(wandb_history(files[0])) > 0
    steps, xs = steps_and_values(files, "a/x")
    assert steps == list(range(rows))
    assert xs == [float(s) for s in range(rows)]
