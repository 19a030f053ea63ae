"""Tracker delivery in a child process (`[backends] delivery = "process"`, the default).

Each test runs a real training script in a child Python (so that what it
imports, and how it ends, is its own) with MLflow on a SQLite file and W&B
offline, and reads back what the trackers stored.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time

import pytest

from reliability_helpers import PYTHON, child_env, meta, mlflow_history, mlflow_run, read_run_dir, run_child, wandb_files, wandb_history

TRAIN = textwrap.dedent(
    """
    import json, os, sys, time
    import rltrack

    root, records, ending = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    logger = rltrack.make_logger({"run": {"root": root, "name": "child"}, "backends": {"use": ["local", "mlflow", "wandb"]}})
    print(f"RUN_DIR={logger.run_dir}", flush=True)
    print(f"DELIVERY_PID={logger._delivery_process._child.pid}", flush=True)
    for i in range(records):
        logger.write({"x": float(i), "y": -float(i)}, step={"env_steps": i}, namespace="learner")
    if ending == "close":
        complete = logger.close(timeout=120)
        heavy = sorted(m for m in ("mlflow", "wandb", "neptune", "sqlalchemy") if m in sys.modules)
        print("RESULT=" + json.dumps({"complete": complete, "imported": heavy}), flush=True)
    else:  # wait to be interrupted or killed
        logger.flush()
        print("WAITING", flush=True)
        time.sleep(600)
    """
)


def result(stdout: str) -> dict:
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("RESULT="))[len("RESULT="):])


def run_dir_of(stdout: str):
    from pathlib import Path

    return Path(next(line for line in stdout.splitlines() if line.startswith("RUN_DIR="))[len("RUN_DIR="):])


def gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_the_training_process_never_imports_a_tracker_client_and_the_trackers_get_everything(tmp_path):
    done = run_child(TRAIN, str(tmp_path / "runs"), "500", "close", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert result(done.stdout) == {"complete": True, "imported": []}
    run_dir = run_dir_of(done.stdout)
    expected = [(i, float(i)) for i in range(500)]
    assert mlflow_history(run_dir, "learner/x") == expected
    assert [(row["env_steps"], row["learner/x"]) for path in wandb_files(run_dir) for row in wandb_history(path)] == expected
    report = json.loads((run_dir / "report.json").read_text())  # the child's counts are merged into the run's report
    assert report["counts"]["mlflow.delivered"] == {"metric values": 1000, "scalars events": 500}
    client, run_id = mlflow_run(run_dir)
    assert client.get_run(run_id).info.status == "FINISHED"


def test_ctrl_c_reaches_the_whole_group_and_the_run_is_still_delivered_as_killed(tmp_path):
    child = subprocess.Popen(
        [PYTHON, "-c", TRAIN, str(tmp_path / "runs"), "300", "wait"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=child_env(tmp_path), cwd=tmp_path, start_new_session=True,
    )  # fmt: skip
    try:
        run_dir = read_run_dir(child.stdout)
        assert any(line.startswith("WAITING") for line in child.stdout)
        os.killpg(child.pid, signal.SIGINT)  # as a terminal's Ctrl-C does: the delivery process gets it too
        child.wait(timeout=180)
    finally:
        child.kill()
    assert meta(run_dir)["status"] == "killed"
    client, run_id = mlflow_run(run_dir)
    assert client.get_run(run_id).info.status == "KILLED"
    assert mlflow_history(run_dir, "learner/x") == [(i, float(i)) for i in range(300)]
    assert len([row for path in wandb_files(run_dir) for row in wandb_history(path)]) == 300


def test_the_delivery_process_ends_with_a_training_process_that_is_killed(tmp_path):
    child = subprocess.Popen(
        [PYTHON, "-c", TRAIN, str(tmp_path / "runs"), "100", "wait"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=child_env(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    try:
        read_run_dir(child.stdout)
        pid = int(next(line for line in child.stdout if line.startswith("DELIVERY_PID=")).split("=")[1])
        assert not gone(pid, 1.0)  # delivering alongside training
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        child.kill()
    assert gone(pid, 15.0)  # its stdin ended: it stops, as delivery threads die with their process; `rltrack sync` does the rest


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_both_delivery_modes_store_the_same(tmp_path, mode):
    script = TRAIN.replace('"backends": {"use": ["local", "mlflow", "wandb"]}', f'"backends": {{"use": ["local", "mlflow"], "delivery": "{mode}"}}')
    script = script.replace('print(f"DELIVERY_PID={logger._delivery_process._child.pid}", flush=True)', "")
    done = run_child(script, str(tmp_path / "runs"), "200", "close", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert result(done.stdout) == {"complete": True, "imported": [] if mode == "process" else ["mlflow", "sqlalchemy"]}
    assert mlflow_history(run_dir_of(done.stdout), "learner/x") == [(i, float(i)) for i in range(200)]
