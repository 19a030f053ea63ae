"""The trackio backend: what trackio's store holds, read back with trackio's
own storage API (`SQLiteStorage`, as its CLI and dashboard read it) in a
process whose `TRACKIO_DIR` is the store, after a run, a resume, a re-sent
batch, a SIGKILL and `rltrack sync`, a Neptune rescue and a local-only run
synced later; and its dashboard opened in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip(
    "trackio", reason="trackio is not installed: pip install 'rltrack[trackio]'"
)

from reliability_helpers import PYTHON, child_env, read_run_dir, sync_run
from trackio_reader import store
from waiting import wait_until
from rltrack.core.refusals import NON_FINITE_ENTRY

import rltrack
from journal_batch import journal_batch, with_saved_state
from rltrack.delivery.registry import RunContext
from rltrack.trackers.trackio import TrackioBackend
from rltrack.delivery.cursor import Cursor, tracker_state
from rltrack.core.report import Report

def series(rows: list[dict[str, Any]], key: str) -> list[tuple[int, Any]]:
    return sorted((row["step"], row[key]) for row in rows if key in row)


def journal_series(run_dir: Path, key: str) -> list[tuple[int, Any]]:
    return sorted(
        (e.primary_step, e.data[k])
        for e in rltrack.read_journal(run_dir)
        if e.kind == "scalars"
        for k in e.data
        if e.tag(k) == key
    )


def config(tmp_path: Path, **trackio: Any) -> dict[str, Any]:
    return {
        "run": {
            "root": str(tmp_path / "runs"),
            "name": "cartpole",
            "task": "sweep",
            "close_timeout": 120,
        },
        "backends": {"use": ["local", "trackio"], "trackio": trackio},
    }


def write_run(logger: rltrack.Logger, start: int, end: int) -> None:
    for i in range(start, end):
        logger.write(
            {"reward_mean": i * 0.5, "episodes": i},
            step={"env_steps": 100 * i, "train_iter": i},
            namespace="collector",
        )


def test_a_run_reaches_trackio_value_by_value(tmp_path):
    (tmp_path / "runs").mkdir()
    with rltrack.make_logger(config(tmp_path)) as logger:
        logger.log_hparams({"lr": 3e-4, "net": {"width": 64}})
        write_run(logger, 0, 50)
        logger.write(
            {"time": 7.0, "env_steps": 5.0, "big": 2**70},
            step={"env_steps": 4900, "train_iter": 49},
        )
        logger.log_text("note", "# diverged\nat *the* end", step=4900)
        (logger.run_dir / "frame.png").write_bytes(b"")
        logger.write(
            {"pixels": np.arange(48, dtype=np.uint8).reshape(4, 4, 3).tolist()},
            step={"env_steps": 4900},
            namespace="evaluator",
            kind="image",
        )
        logger.write(
            {"weights": [1.0, 2.0, 2.5, float("nan")]},
            step={"env_steps": 4900},
            namespace="learner",
            kind="histogram",
        )
    held = store(tmp_path / "runs" / "trackio", "sweep")
    assert held["runs"] == ["cartpole"]
    rows = held["logs"]["cartpole"]
    assert series(rows, "collector/reward_mean") == [
        (100 * i, i * 0.5) for i in range(50)
    ]
    assert series(rows, "collector/episodes") == [(100 * i, i) for i in range(50)]
    assert series(rows, "train_iter") == [(100 * i, i) for i in range(50)] + [
        (4900, 49)
    ]  # the other axis alongside
    assert series(rows, "__time") == [(4900, 7.0)] and series(
        rows, "env_steps_value"
    ) == [(4900, 5.0)]
    assert series(rows, "big") == [(4900, float(2**70))]
    (note,) = [row["note"] for row in rows if "note" in row]
    assert note == {"_type": "trackio.markdown", "_value": "# diverged\nat *the* end"}
    (image,) = [row["evaluator/pixels"] for row in rows if "evaluator/pixels" in row]
    assert (
        image["_type"] == "trackio.image"
        and (tmp_path / "runs" / "trackio" / "media" / image["file_path"]).is_file()
    )
    (histogram,) = [row["learner/weights"] for row in rows if "learner/weights" in row]
    assert histogram["_type"] == "trackio.histogram" and sum(histogram["values"]) == 3
    assert {
        k: v for k, v in held["config"]["cartpole"].items() if not k.startswith("_")
    } == {"lr": 3e-4, "net": {"width": 64}}
    report = json.loads((logger.run_dir / "report.json").read_text())
    assert report["renamed"]["trackio"] == {
        "time": "__time",
        "env_steps": "env_steps_value",
    }
    assert sum(n for reason, n in report["counts"]["trackio.refused"].items() if reason.startswith(NON_FINITE_ENTRY)) == 1
    assert (
        tracker_state(logger.run_dir, "trackio")["project"]
        == "sweep"
    )


def test_a_batch_delivered_twice_is_stored_once_and_a_resume_continues_the_run(
    tmp_path,
):
    (tmp_path / "runs").mkdir()
    cfg = config(tmp_path, project="resumed", dir=str(tmp_path / "store"))
    with rltrack.make_logger(cfg) as logger:
        write_run(logger, 0, 30)
    backend = TrackioBackend(
        project="resumed", dir=str(tmp_path / "store")
    )  # what a worker does after a kill: the same batch again
    backend.open(RunContext(logger.run_dir, "cartpole", cfg, Report()))
    with_saved_state(backend, logger.run_dir).deliver(*journal_batch(logger.run_dir))
    with rltrack.make_logger(cfg, resume=logger.run_dir) as resumed:
        write_run(resumed, 30, 60)
    held = store(tmp_path / "store", "resumed")
    assert held["runs"] == ["cartpole"]  # the same trackio run
    assert series(held["logs"]["cartpole"], "collector/reward_mean") == [
        (100 * i, i * 0.5) for i in range(60)
    ]
    assert not (tmp_path / "runs" / "trackio").exists()  # the store is where `dir` says


CRASHING = textwrap.dedent(
    """
    import os, signal, sys
    import rltrack

    logger = rltrack.make_logger({"run": {"root": sys.argv[1], "name": "killed", "task": "crash"},
                                  "backends": {"use": ["local", "trackio"]}})
    logger.log_hparams({"algo": "ppo"})
    print(f"RUN_DIR={logger.run_dir}", flush=True)
    i = 0
    while True:
        for _ in range(40):
            logger.write({"x": float(i)}, step={"env_steps": i, "train_iter": i // 100}, namespace="learner")
            i += 1
        logger.flush()
    """
)


@pytest.mark.slow
def test_a_run_killed_with_sigkill_is_completed_by_sync(tmp_path):
    child = subprocess.Popen(
        [PYTHON, "-c", CRASHING, str(tmp_path / "runs")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(tmp_path),
        cwd=tmp_path,
    )
    try:
        run_dir = read_run_dir(child.stdout)  # type: ignore[arg-type]

        def delivering() -> bool:
            assert child.poll() is None, child.stderr.read()  # type: ignore[union-attr]
            return Cursor(run_dir, "trackio").delivered > 0

        wait_until(delivering, 180, "trackio to receive something")
        time.sleep(1.0)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    synced: list = []  # the last try's result
    wait_until(lambda: synced.append(sync_run(run_dir, tmp_path, "--to", "trackio")) or synced[-1].returncode == 0, 180,
               lambda: f"rltrack sync to succeed (the agent may hold the cursor a while): {synced[-1].stderr}", every=1)  # fmt: skip
    rows = store(tmp_path / "runs" / "trackio", "crash")["logs"]["killed"]
    assert series(rows, "learner/x") == journal_series(run_dir, "learner/x")
    assert len(series(rows, "learner/x")) > 40


def test_a_local_only_run_is_synced_to_trackio_later(tmp_path):
    with rltrack.make_logger(
        {
            "run": {"root": str(tmp_path / "runs"), "name": "local_only"},
            "backends": {"use": ["local"]},
        }
    ) as logger:
        logger.log_hparams({"gamma": 0.99})
        write_run(logger, 0, 20)
    done = sync_run(logger.run_dir, tmp_path, "--to", "trackio")
    assert done.returncode == 0, done.stderr
    held = store(tmp_path / "runs" / "trackio", "local_only")
    assert series(held["logs"]["local_only"], "collector/reward_mean") == [
        (100 * i, i * 0.5) for i in range(20)
    ]
    assert held["config"]["local_only"]["gamma"] == 0.99
    again = sync_run(logger.run_dir, tmp_path, "--to", "trackio")
    assert "nothing pending" in again.stderr
    assert (
        len(store(tmp_path / "runs" / "trackio", "local_only")["logs"]["local_only"])
        == 20
    )


def test_a_neptune_rescue_lands_in_trackio(tmp_path, monkeypatch):
    pytest.importorskip("neptune")
    import neptune_offline

    for var in (
        "NEPTUNE_API_TOKEN",
        "NEPTUNE_PROJECT",
        "NEPTUNE_MODE",
        "NEPTUNE_DATA_DIRECTORY",
    ):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    neptune_offline.write_offline_run(tmp_path)
    imported = subprocess.run(
        [PYTHON, "-m", "rltrack.cli", "import", "neptune", str(tmp_path / "project" / ".neptune"), "--root", str(tmp_path / "runs")],
        capture_output=True, text=True, env=child_env(tmp_path), timeout=300, check=False,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    (run_dir,) = [
        d for d in (tmp_path / "runs").iterdir() if (d / "meta.json").is_file()
    ]
    done = sync_run(run_dir, tmp_path, "--to", "trackio")
    assert done.returncode == 0, done.stderr
    project = json.loads((run_dir / "meta.json").read_text())["task"]
    (rows,) = store(tmp_path / "runs" / "trackio", project)["logs"].values()
    for key in ("train/loss", "eval/reward", "train/lr"):
        assert series(rows, key) == journal_series(run_dir, key), key
    assert len(series(rows, "train/loss")) == 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_the_dashboard_lists_the_run_and_a_metric_in_chromium(tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip(
            "Chromium is not installed (apt-get install -y chromium): the trackio dashboard is not opened"
        )
    with rltrack.make_logger(config(tmp_path)) as logger:
        write_run(logger, 0, 20)
    port = free_port()
    env = {
        **child_env(tmp_path),
        "TRACKIO_DIR": str(tmp_path / "runs" / "trackio"),
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    launcher = f"import trackio; trackio.show(project='sweep', host='127.0.0.1', server_port={port}, open_browser=False, block_thread=True)"
    server = subprocess.Popen(
        [PYTHON, "-c", launcher],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:

        def listening() -> bool:
            assert server.poll() is None, "the dashboard ended"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_until(listening, 120, "the dashboard to listen", every=0.5)
        command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
                   "--dump-dom", "--virtual-time-budget=15000", f"http://127.0.0.1:{port}/?project=sweep"]  # fmt: skip
        dom = subprocess.run(
            command, capture_output=True, text=True, timeout=180, check=False
        ).stdout
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    assert "cartpole" in dom and "reward_mean" in dom, dom[-2000:]
