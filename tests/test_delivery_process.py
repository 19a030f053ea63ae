"""Tracker delivery in a child process (`[backends] delivery = "process"`, the default).

Each test runs a real training script in a child Python (so that what it
imports, and how it ends, is its own) with MLflow on a SQLite file and W&B
offline, and reads back what the trackers stored.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import textwrap
import time

import psutil
import pytest

from reliability_helpers import (
    PYTHON, child_env, meta, mlflow_history, mlflow_run, read_run_dir, run_child, sync_run, wandb_files, wandb_history,
)  # fmt: skip
from stage_reader import read_tfevents

import rltrack
from rltrack.delivery_process import NICENESS

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
    run_dir = read_run_dir(done.stdout.splitlines())
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


def start_waiting_training(tmp_path) -> tuple[subprocess.Popen, int]:
    """A training process that has written 100 records and waits, and the pid of its delivery child."""
    child = subprocess.Popen(
        [PYTHON, "-c", TRAIN, str(tmp_path / "runs"), "100", "wait"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=child_env(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    try:
        read_run_dir(child.stdout)
        return child, int(next(line for line in child.stdout if line.startswith("DELIVERY_PID=")).split("=")[1])
    except BaseException:
        child.kill()
        raise


def test_the_delivery_process_ends_with_a_training_process_that_is_killed(tmp_path):
    child, pid = start_waiting_training(tmp_path)
    try:
        assert not gone(pid, 1.0)  # delivering alongside training
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        child.kill()
    assert gone(pid, 15.0)  # its stdin ended: it stops, as delivery threads die with their process; `rltrack sync` does the rest


def autogroup_niceness(pid: str) -> int | None:
    """None where the file is missing (not Linux, a kernel without autogroups)
    or empty: the root autogroup, of processes started by init that never began
    a session (as CI's may be)."""
    try:
        with open(f"/proc/{pid}/autogroup") as f:  # "/autogroup-<n> nice <value>"
            fields = f.read().split()
    except OSError:
        return None
    return int(fields[-1]) if fields else None


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="scheduling policies are Linux's")
def test_the_delivery_process_is_a_niced_batch_process(tmp_path):
    """SCHED_BATCH: the child never preempts training when it wakes; its CPU
    share stays the niceness's, which its session (Linux's autogroup) gets too."""
    child, pid = start_waiting_training(tmp_path)
    own_session = autogroup_niceness("self")  # None in the root autogroup: the session is then ranked as the process
    autogroups = os.path.exists("/proc/self/autogroup")
    session_niceness = min((own_session if own_session is not None else os.getpriority(os.PRIO_PROCESS, 0)) + NICENESS, 19)
    try:
        deadline = time.monotonic() + 30  # the child sets both once it has started
        while time.monotonic() < deadline and (
            os.sched_getscheduler(pid) != os.SCHED_BATCH or (autogroups and autogroup_niceness(str(pid)) != session_niceness)
        ):
            time.sleep(0.05)
        assert os.sched_getscheduler(pid) == os.SCHED_BATCH
        assert os.getpriority(os.PRIO_PROCESS, pid) - os.getpriority(os.PRIO_PROCESS, 0) == min(NICENESS, 19 - os.getpriority(os.PRIO_PROCESS, 0))
        if autogroups:
            assert autogroup_niceness(str(pid)) == session_niceness
    finally:
        child.kill()
        child.wait(timeout=30)


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_both_delivery_modes_store_the_same(tmp_path, mode):
    script = TRAIN.replace('"backends": {"use": ["local", "mlflow", "wandb"]}', f'"backends": {{"use": ["local", "mlflow"], "delivery": "{mode}"}}')
    script = script.replace('print(f"DELIVERY_PID={logger._delivery_process._child.pid}", flush=True)', "")
    done = run_child(script, str(tmp_path / "runs"), "200", "close", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert result(done.stdout) == {"complete": True, "imported": [] if mode == "process" else ["mlflow", "sqlalchemy"]}
    assert mlflow_history(read_run_dir(done.stdout.splitlines()), "learner/x") == [(i, float(i)) for i in range(200)]


PIPELINE = textwrap.dedent(
    """
    import json, sys
    import rltrack

    root = sys.argv[1]
    logger = rltrack.make_logger({
        "run": {"root": root, "name": "piped"},
        "backends": {"use": ["local", "mlflow"]},
        "filters": [{"type": "smoothing", "regex": "reward", "coeff": 0.5}],
    })
    print(f"RUN_DIR={logger.run_dir}", flush=True)
    logger.log_hparams({"lr": 0.01})
    for i in range(400):
        logger.write({"reward": float(i % 2), "x": float(i)}, step=i, namespace="learner")
    assert logger.flush(timeout=60)
    journal = [json.loads(line) for line in open(logger.run_dir / "journal.jsonl")]
    csv_lines = open(logger.run_dir / "progress.csv").read().splitlines()
    logger.log_checkpoint(logger.run_dir / "total_config.py", iteration=7, metric=1.0)
    complete = logger.close(timeout=120)
    print("RESULT=" + json.dumps({"complete": complete, "journal": journal, "csv_rows": len(csv_lines) - 1}), flush=True)
    """
)


def test_the_child_runs_the_filters_journal_and_local_files_and_flush_waits_for_it(tmp_path):
    """With trackers and no in-process backend, the child runs the pipeline:
    `flush` returns once the child's journal and files hold every record
    written before it, filter outputs included; checkpoints, hyperparameters
    (meta.json's tracked values stay with the training process) and the
    run's end all arrive."""
    done = run_child(PIPELINE, str(tmp_path / "runs"), home=tmp_path)
    assert done.returncode == 0, done.stderr
    out = result(done.stdout)
    assert out["complete"] is True
    scalars = [e for e in out["journal"] if e["kind"] == "scalars"]
    assert [e["data"]["x"] for e in scalars] == [float(i) for i in range(400)]
    smoothed, s, c = [], 0.0, 0.0
    for i in range(400):  # the smoothing filter ran in the child (Acme's warm-up, see SmoothingFilter)
        s, c = float(i % 2) * (1 - c) + s * c, 0.9 * c + 0.1 * 0.5
        smoothed.append(s)
    assert [e["data"]["reward"] for e in scalars] == [float(i % 2) for i in range(400)]
    assert [e["data"]["reward_smoothed"] for e in scalars] == pytest.approx(smoothed)
    assert out["csv_rows"] >= 399  # every step's row is written once the next step begins
    run_dir = read_run_dir(done.stdout.splitlines())
    artifacts = [e for e in map(json.loads, open(run_dir / "journal.jsonl")) if e["kind"] == "artifact"]
    assert [a["data"]["iteration"] for a in artifacts] == [7]
    assert meta(run_dir)["status"] == "finished"
    assert mlflow_history(run_dir, "learner/x") == [(i, float(i)) for i in range(400)]
    client, run_id = mlflow_run(run_dir)
    assert client.get_run(run_id).data.params["lr"] == "0.01"


def test_flush_returns_when_the_delivery_child_is_gone(tmp_path):
    """A child that died (killed, out of memory) never answers a flush: a
    flush asked for after that returns at once instead of waiting forever."""
    script = textwrap.dedent(
        """
        import os, signal, sys, threading
        import rltrack

        logger = rltrack.make_logger({"run": {"root": sys.argv[1], "name": "orphan"}, "backends": {"use": ["local", "mlflow"]}})
        logger.write({"x": 1.0}, step=0)
        assert logger.flush(timeout=60)
        child = logger._delivery_process._child
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        logger.write({"x": 2.0}, step=1)
        done = []
        waiter = threading.Thread(target=lambda: done.append(logger.flush()), daemon=True)
        waiter.start()
        waiter.join(30)
        print("RESULT=" + __import__("json").dumps({"returned": done}), flush=True)
        os._exit(0)
        """
    )
    done = run_child(script, str(tmp_path / "runs"), home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert result(done.stdout) == {"returned": [True]}


def test_when_the_delivery_child_dies_the_training_process_takes_the_pipeline_over(tmp_path):
    """The child runs the filters, journal and local files; if it is killed
    mid-run, the training process's pipeline thread runs them from then on,
    and a `flush` returns once it has written what came before:
    the journal and TensorBoard hold every record written before the kill
    (flushed) and after it, each once (progress.csv all but the row the child
    still held), the filters still run, the run
    ends `finished` with the error reported, and `rltrack sync` brings MLflow
    to exactly the journal."""
    script = textwrap.dedent(
        """
        import json, os, signal, sys
        import rltrack

        logger = rltrack.make_logger({"run": {"root": sys.argv[1], "name": "takeover"}, "backends": {"use": ["local", "mlflow"]},
                                      "filters": [{"type": "smoothing", "regex": "^x$", "coeff": 0.5}]})
        print(f"RUN_DIR={logger.run_dir}", flush=True)
        for i in range(200):
            logger.write({"x": float(i)}, step=i, namespace="learner")
        assert logger.flush(timeout=60)
        child = logger._delivery_process._child
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        for i in range(200, 500):
            logger.write({"x": float(i)}, step=i, namespace="learner")
        flushed = logger.flush(timeout=60)
        at_flush = sum(1 for line in open(logger.run_dir / "journal.jsonl") if '"kind":"scalars"' in line)
        complete = logger.close(timeout=60)
        print("RESULT=" + json.dumps({"flushed": flushed, "at_flush": at_flush, "complete": complete, "imported": "mlflow" in sys.modules}), flush=True)
        """
    )
    done = run_child(script, str(tmp_path / "runs"), home=tmp_path)
    assert done.returncode == 0, done.stderr
    # flush waited for the takeover to journal the records written after the kill; MLflow is left to `rltrack sync`
    assert result(done.stdout) == {"flushed": True, "at_flush": 500, "complete": False, "imported": False}
    assert "delivery process ended mid-run" in done.stderr and "rltrack sync" in done.stderr
    run_dir = read_run_dir(done.stdout.splitlines())
    scalars = [e for e in map(json.loads, open(run_dir / "journal.jsonl")) if e["kind"] == "scalars"]
    assert [e["data"]["x"] for e in scalars] == [float(i) for i in range(500)]
    assert all("x_smoothed" in e["data"] for e in scalars)  # the filters ran on both sides of the kill
    csv_x = {float(row["learner/x"]) for row in csv.DictReader(open(run_dir / "progress.csv", newline="")) if row["learner/x"]}
    assert {float(i) for i in range(500)} - csv_x <= {199.0}  # at most the row the child held: step 199's, due when step 200 began
    tb = read_tfevents(run_dir / "log" / "serial")["learner/x"]
    assert sorted(tb) == list(range(500)) and all(values == [float(step)] for step, values in tb.items())
    assert meta(run_dir)["status"] == "finished"
    errors = json.loads((run_dir / "report.json").read_text())["counts"]["core.errors"]
    assert any("delivery process ended mid-run" in reason for reason in errors)
    synced = sync_run(run_dir, tmp_path)
    assert synced.returncode == 0, synced.stderr
    assert mlflow_history(run_dir, "learner/x") == [(i, float(i)) for i in range(500)]


def test_when_the_delivery_child_dies_within_a_batch_sent_entry_by_entry_nothing_is_journaled_twice(tmp_path):
    """A batch holding a value that cannot be pickled is sent entry by entry,
    that one dropped and counted. If the child dies partway through, the
    training process takes over from the first entry the child did not get:
    the entries the child got and journaled are not journaled again."""
    script = textwrap.dedent(
        """
        import json, os, signal, sys, time
        import rltrack

        logger = rltrack.make_logger({"run": {"root": sys.argv[1], "name": "split"}, "backends": {"use": ["local", "mlflow"]}})
        print(f"RUN_DIR={logger.run_dir}", flush=True)
        assert logger.flush(timeout=60)  # the child is up
        child, journal = logger._delivery_process._child, logger.run_dir / "journal.jsonl"

        class KillsTheChild:
            # pickled on the pipeline thread with its whole batch first, then
            # alone once the entry before it went alone: that second time it
            # waits until the child has journaled that entry, and kills the child
            pickled = 0

            def __reduce__(self):
                KillsTheChild.pickled += 1
                if KillsTheChild.pickled == 1:
                    raise TypeError("cannot pickle this")
                deadline = time.monotonic() + 60
                while '"x":0.0' not in journal.read_text() and time.monotonic() < deadline:
                    time.sleep(0.01)
                os.kill(child.pid, signal.SIGKILL)
                child.wait()
                raise TypeError("cannot pickle this")

        logger.write({"x": 0.0}, step=0, namespace="learner")  # the three go in one batch
        logger.write({"frame": KillsTheChild()}, step=1, namespace="learner", kind="image")
        logger.write({"x": 2.0}, step=2, namespace="learner")
        flushed = logger.flush(timeout=60)
        logger.close(timeout=60)
        print("RESULT=" + json.dumps({"flushed": flushed}), flush=True)
        """
    )
    done = run_child(script, str(tmp_path / "runs"), home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert result(done.stdout) == {"flushed": True}
    run_dir = read_run_dir(done.stdout.splitlines())
    events = [json.loads(line) for line in open(run_dir / "journal.jsonl")]
    assert [(e["kind"], e["data"]) for e in events if e["namespace"] == "learner"] == [("scalars", {"x": 0.0}), ("scalars", {"x": 2.0})]
    dropped = json.loads((run_dir / "report.json").read_text())["counts"]["core.dropped"]
    assert dropped == {"image event: cannot be sent to the delivery process (TypeError)": 1}


def test_with_the_local_directory_alone_the_pipeline_still_runs_in_the_delivery_child(tmp_path):
    """No tracker: the child is started for the pipeline alone, so the filters
    and the local files do not share the training process's GIL. The journal
    and the files are open in the child, not here, and they hold everything."""
    logger = rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": "alone"}, "backends": {"use": ["local"]},
                                  "filters": [{"type": "smoothing", "regex": "^x$", "coeff": 0.5}]})  # fmt: skip
    try:
        for i in range(300):
            logger.write({"x": float(i)}, step=i, namespace="learner")
        assert logger.flush(timeout=60)
        journal = str(logger.run_dir / "journal.jsonl")
        holders = [child for child in psutil.Process().children() if journal in {f.path for f in child.open_files()}]
        assert len(holders) == 1
        assert journal not in {f.path for f in psutil.Process().open_files()}
    finally:
        assert logger.close(timeout=60)
    scalars = [e for e in map(json.loads, open(logger.run_dir / "journal.jsonl")) if e["kind"] == "scalars"]
    assert [(e["data"]["x"], "x_smoothed" in e["data"]) for e in scalars] == [(float(i), True) for i in range(300)]
    assert sorted(read_tfevents(logger.run_dir / "log" / "serial")["learner/x"]) == list(range(300))
