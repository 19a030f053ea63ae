"""Every way a training script ends without calling `close()`: SIGTERM, Ctrl-C,
an exception escaping the loop, and a plain end of the script. Each time,
everything written reaches the journal and every tracker, and the run's
status says how it ended, in meta.json and in each tracker.

The script runs in a real child process with the local directory, MLflow
(SQLite file), W&B (offline) and Neptune (offline), and ends mid-run, once
every tracker is delivering (a script that ends before its trackers' packages
are even imported is a separate case, see docs/RELIABILITY.md); the trackers
are read back from their own stores.
"""

from __future__ import annotations

import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

import rltrack
from reliability_helpers import PYTHON, read_run_dir, child_env, meta, run_child, mlflow_history, mlflow_run, neptune_failed, neptune_floats, wandb_exit_codes, wandb_files, wandb_history

RECORDS = 500

SCRIPT = textwrap.dedent(
    """
    import sys, time
    import rltrack

    logger = rltrack.make_logger({{"run": {{"root": sys.argv[1], "name": "ending"}},
                                   "backends": {{"use": ["local", "mlflow", "wandb", "neptune"], "wandb": {{"project": "exits"}}}}}})
    from rltrack.delivery.cursor import Cursor, tracker_state
    from waiting import wait_until  # tests/helpers: child_env puts it on the path

    for i in range({records}):
        logger.write({{"x": float(i)}}, step=i, namespace="learner")
        if i == {records} // 2:  # mid-run: every tracker is up and delivering (W&B's run is made; its
            # cursor moves only once wandb-core has flushed rows to its file, some 10 s later)
            wait_until(lambda: all(Cursor(logger.run_dir, name).delivered for name in ("mlflow", "neptune")) and tracker_state(logger.run_dir, "wandb"),
                       180, "every tracker to deliver")  # fmt: skip
    print(f"RUN_DIR={{logger.run_dir}}", flush=True)
    {ending}
    """
)

ENDINGS = {
    "sigterm": ("time.sleep(300)", "killed", -signal.SIGTERM),
    "keyboard_interrupt": ("raise KeyboardInterrupt", "killed", -signal.SIGINT),  # Python ends an uncaught Ctrl-C by SIGINT
    "exception": ("raise RuntimeError('the loss diverged')", "failed", 1),
    "plain_exit": ("", "finished", 0),
}
MLFLOW_STATUS = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED"}
WANDB_EXIT_CODE = {"finished": 0, "failed": 1, "killed": 255}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """One HOME for the scripts of every ending, so one agent serves them in
    turn: what is tested is how a script ends, and a cold agent importing
    three tracker clients and creating the MLflow store took 11 s of CPU each time."""
    return tmp_path_factory.mktemp("exits_home")


@pytest.mark.slow
@pytest.mark.parametrize("ending", list(ENDINGS))
def test_everything_written_is_delivered_and_the_status_says_how_the_run_ended(tmp_path: Path, home: Path, ending: str) -> None:
    code, status, returncode = ENDINGS[ending]
    script = SCRIPT.format(records=RECORDS, ending=code)
    child = subprocess.Popen(
        [PYTHON, "-c", script, str(tmp_path / "runs")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(home), cwd=tmp_path,
    )  # fmt: skip
    run_dir = read_run_dir(child.stdout)
    if ending == "sigterm":
        child.send_signal(signal.SIGTERM)
    try:
        _, stderr = child.communicate(timeout=240)
    finally:
        child.kill()
    assert child.returncode == returncode, stderr

    expected = [(i, float(i)) for i in range(RECORDS)]
    assert [(e.primary_step, e.data["x"]) for e in rltrack.read_journal(run_dir)] == expected
    assert meta(run_dir)["status"] == status
    assert mlflow_history(run_dir, "learner/x") == expected
    client, run_id = mlflow_run(run_dir)
    assert client.get_run(run_id).info.status == MLFLOW_STATUS[status]
    (wandb_file,) = wandb_files(run_dir)
    assert [(row["step"], row["learner/x"]) for row in wandb_history(wandb_file)] == expected
    assert wandb_exit_codes(run_dir) == [WANDB_EXIT_CODE[status]]
    assert neptune_floats(run_dir, "learner/x") == expected
    assert neptune_failed(run_dir)[-1] is (status != "finished")


ONE_TRACEBACK = textwrap.dedent(
    """
    import sys, time
    import rltrack

    logger = rltrack.make_logger({"run": {"root": sys.argv[1], "name": "traceback"}, "backends": {"use": ["local"]}})
    logger.write({"x": 1.0}, step=0, namespace="learner")
    import wandb
    wandb.init(project="exits", mode="offline")  # the script's own: its exit hook wraps rltrack's
    print(f"RUN_DIR={logger.run_dir}", flush=True)
    raise RuntimeError("the loss diverged")
    """
)


def test_an_uncaught_exception_is_printed_once_when_the_script_runs_wandb_itself(tmp_path: Path) -> None:
    """wandb's exit hook prints the traceback and then calls the hook it
    replaced: rltrack's, which notes how the run ended and must not print it again."""
    done = run_child(ONE_TRACEBACK, str(tmp_path / "runs"), home=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("Traceback (most recent call last)") == 1, done.stderr
    assert done.stderr.count("RuntimeError: the loss diverged") == 1, done.stderr
    assert meta(read_run_dir(done.stdout.splitlines()))["status"] == "failed"
