"""`rltrack sync` finishes deliveries cut short and replays runs into trackers.

The command runs as a user runs it (`python -m rltrack.cli sync ...` in a
subprocess) against a real `mlflow server` (see mlflow_server.py), and what
the server holds afterwards is compared with what the run wrote.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import rltrack
from mlflow_server import history, tracker
from reliability_helpers import reported
from rltrack.cli import entry as cli
from rltrack.delivery.cursor import Cursor, tracker_state
from waiting import wait_until

pytest_plugins = ["mlflow_server"]


def sync_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rltrack.cli", "sync", *args], capture_output=True, text=True, timeout=600)



@pytest.mark.slow
def test_sync_completes_a_delivery_the_run_could_not_finish(mlflow_server, tmp_path):
    logger = rltrack.make_logger({
        "run": {"root": str(tmp_path), "name": "cut"},
        "backends": {"use": ["local", "mlflow"], "mlflow": {"tracking_uri": mlflow_server.uri}},
    })
    logger.log_hparams({"lr": 0.01})
    for i in range(100):
        logger.write({"reward": float(i)}, step=i, namespace="collector")
    logger.flush()
    wait_until(lambda: Cursor(logger.run_dir, "mlflow").offset >= (logger.run_dir / "journal.jsonl").stat().st_size, 60, "the server to catch up")
    try:
        mlflow_server.stop()
        for i in range(100, 300):
            logger.write({"reward": float(i)}, step=i, namespace="collector")
        assert logger.close(timeout=1) is False
    finally:
        mlflow_server.start()
    reported(logger.run_dir, "mlflow.pending")
    client, run_id = tracker(logger.run_dir)
    assert len(history(client, run_id, "collector/reward")) == 100

    done = sync_command(str(logger.run_dir))
    assert done.returncode == 0, done.stderr
    assert "100%" in done.stderr
    assert tracker(logger.run_dir)[1] == run_id  # the same MLflow run, continued
    assert history(client, run_id, "collector/reward") == [(i, float(i)) for i in range(300)]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"lr": "0.01"}
    assert "mlflow.pending" not in json.loads((logger.run_dir / "report.json").read_text())["counts"]

    again = sync_command(str(logger.run_dir))
    assert again.returncode == 0, again.stderr
    assert "nothing pending" in again.stderr
    assert len(history(client, run_id, "collector/reward")) == 300
    assert client.get_run(run_id).info.end_time == run.info.end_time


CRASHING_RUN = """
import os, sys
import rltrack

logger = rltrack.make_logger({"run": {"root": sys.argv[1], "name": "crashed"}})
logger.log_hparams({"algo": "ppo", "net": {"width": 64}})
for i in range(150):
    logger.write({"return": i * 0.5, "loss": 1 / (i + 1)}, step={"env_steps": 100 * i, "train_iter": i // 5}, namespace="learner")
logger.log_text("note", "diverged at the end", step=149, namespace="learner")
logger.flush()
os._exit(3)  # a crash: no close, meta.json still says running
"""


def test_sync_replays_a_local_only_run_into_mlflow(mlflow_server, tmp_path):
    crashed = subprocess.run([sys.executable, "-c", textwrap.dedent(CRASHING_RUN), str(tmp_path / "runs")], capture_output=True, text=True)
    assert crashed.returncode == 3, crashed.stderr
    run_dir = tmp_path / "runs" / "crashed"
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "running"
    config = tmp_path / "trackers.toml"
    config.write_text(f'[backends.mlflow]\ntracking_uri = "{mlflow_server.uri}"\nexperiment = "replays"\n')

    done = sync_command(str(run_dir), "--to", "mlflow", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "100%" in done.stderr
    client, run_id = tracker(run_dir)
    assert history(client, run_id, "learner/return") == [(100 * i, i * 0.5) for i in range(150)]
    assert history(client, run_id, "learner/loss") == [(100 * i, 1 / (i + 1)) for i in range(150)]
    assert history(client, run_id, "steps/train_iter") == [(100 * i, float(i // 5)) for i in range(150)]
    run = client.get_run(run_id)
    assert run.info.status == "FAILED"  # the process died without closing the run
    assert run.data.params == {"algo": "ppo", "net/width": "64"}
    assert client.get_experiment(run.info.experiment_id).name == "replays"
    assert [a.path for a in client.list_artifacts(run_id, "text/learner")] == ["text/learner/note"]


def test_sync_refuses_a_run_that_is_still_running(tmp_path, capsys):
    logger = rltrack.make_logger({"run": {"root": str(tmp_path), "name": "live"}})
    logger.write({"x": 1.0}, step=0)
    logger.flush()
    try:
        assert cli.main(["sync", str(logger.run_dir), "--to", "mlflow"]) == 2
        assert "is still running" in capsys.readouterr().err
        assert not (logger.run_dir / "cursors" / "mlflow.json").exists()
    finally:
        logger.close()


def test_sync_names_what_it_cannot_deliver_to(tmp_path, capsys):
    with rltrack.make_logger({"run": {"root": str(tmp_path), "name": "done"}}) as logger:
        logger.write({"x": 1.0}, step=0)
    assert cli.main(["sync", str(logger.run_dir)]) == 0
    assert "was sent to no tracker" in capsys.readouterr().err
    assert cli.main(["sync", str(logger.run_dir), "--to", "local"]) == 2
    assert "has nothing to sync" in capsys.readouterr().err
    assert cli.main(["sync", str(tmp_path), "--to", "mlflow"]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_a_torn_last_journal_line_is_removed_and_reported(tmp_path):
    with rltrack.make_logger({"run": {"root": str(tmp_path), "name": "torn"}, "backends": {"use": ["local"]}}) as log:
        for i in range(20):
            log.write({"x": float(i)}, step=i, namespace="learner")
    journal = log.run_dir / "journal.jsonl"
    with journal.open("a") as f:  # what a writer killed in the middle of a line leaves
        f.write('{"time": 1.0, "data": {"x": 2')
    done = sync_command(str(log.run_dir), "--to", "mlflow")
    assert done.returncode == 0, done.stderr
    assert "cut short by a crash" in done.stderr
    report = json.loads((log.run_dir / "report.json").read_text())
    assert report["counts"]["journal.torn"] == {"journal.jsonl: the last line was cut short by a crash and is removed": 1}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [m.value for m in client.get_metric_history(run.info.run_id, "learner/x")] == [float(i) for i in range(20)]


@pytest.mark.slow
def test_a_sync_killed_midway_and_run_again_leaves_a_report_that_says_what_mlflow_holds(tmp_path):
    """The counts and renames are saved with the cursor they describe, so a
    SIGKILL between a delivered batch and anything else cannot make
    report.json disagree with the store (it counted 16,324 of 36,720 values,
    and lost the renames, when report.json was written at the end)."""
    from mlflow import MlflowClient

    with rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": "replay"}, "backends": {"use": ["local"]}}) as logger:
        logger.log_hparams({"seed@run": 3, "note": "x" * 7000})
        for i in range(6000):
            logger.write({"x": float(i), "edge": float("inf") if i % 50 == 0 else 1.0}, step=i)
    run_dir = logger.run_dir
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    (tmp_path / "sync.toml").write_text(f'[backends.mlflow]\ntracking_uri = "{uri}"\nbulk_sqlite = false\n')
    command = [sys.executable, "-m", "rltrack.cli", "sync", str(run_dir), "--to", "mlflow", "--config", str(tmp_path / "sync.toml")]
    first = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    cursor = run_dir / "cursors" / "mlflow.json"
    journal_size = (run_dir / "journal.jsonl").stat().st_size
    wait_until(lambda: cursor.is_file() and json.loads(cursor.read_text())["offset"] >= journal_size / 2, 120, "the first sync to deliver half the journal",
               every=0.01)  # fmt: skip
    first.kill()
    first.wait()
    assert json.loads(cursor.read_text())["offset"] < journal_size  # killed midway
    assert subprocess.run(command, capture_output=True).returncode == 0
    report = json.loads((run_dir / "report.json").read_text())
    client = MlflowClient(uri)
    run_id = tracker_state(run_dir, "mlflow")["run_id"]
    held = {key: client.get_metric_history(run_id, key) for key in ("x", "edge", "steps/step")}
    assert len(held["x"]) == 6000 and sum(abs(m.value) > 1e308 for m in held["edge"]) == 120
    counts = report["counts"]
    assert counts["mlflow.delivered"]["metric values"] == sum(len(history) for history in held.values())
    assert counts["mlflow.converted"]["±inf stored by MLflow as ±1.8e308"] == 120
    assert any("truncated" in reason for reason in counts["mlflow.converted"])
    assert report["renamed"]["mlflow"] == {"seed@run": next(iter(report["renamed"]["mlflow"].values()))}
    assert set(client.get_run(run_id).data.params) == set(report["renamed"]["mlflow"].values()) | {"note"}


def test_sync_gives_up_on_a_tracker_still_down_after_its_timeout_and_says_what_is_pending(tmp_path, monkeypatch, capsys):
    """Nothing waits forever: a sync whose MLflow never answers stops after
    `--timeout` seconds, exits 1, leaves the cursor where it was and names
    the command that finishes the delivery."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # rltrack's retry is what is tested, not the client's
    with rltrack.make_logger({"run": {"root": str(tmp_path), "name": "done"}}) as logger:
        for i in range(50):
            logger.write({"x": float(i)}, step=i)
    config = tmp_path / "down.toml"
    config.write_text('[backends.mlflow]\ntracking_uri = "http://127.0.0.1:9"\n')  # nothing listens on port 9
    assert cli.main(["sync", str(logger.run_dir), "--to", "mlflow", "--config", str(config), "--timeout", "2"]) == 1  # without the limit it never returns
    err = capsys.readouterr().err
    pending = logger.run_dir.joinpath("journal.jsonl").stat().st_size
    assert f"stopped with {pending:,} bytes of the journal pending (still failing after 2 s)" in err
    assert f"rltrack sync {logger.run_dir} --to mlflow" in err
    assert Cursor(logger.run_dir, "mlflow").offset == 0


def _mlflow_values(database, key):
    """Every run's values of `key` in the MLflow SQLite store `database`, per run name."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{database}")
    found = client.search_runs([e.experiment_id for e in client.search_experiments()])
    return {run.info.run_name: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)] for run in found}


@pytest.mark.slow
def test_sync_replays_a_delivered_run_into_another_store_once(tmp_path):
    """The README's merge workflow: a run delivered to the default MLflow file and
    trackio directory, then `rltrack sync RUN --to mlflow --to trackio --config shared.toml`
    with other stores: the whole run lands there; a second sync, into either store, sends nothing."""
    pytest.importorskip("trackio")
    from trackio_reader import store

    root, shared = tmp_path / "runs", tmp_path / "shared"
    with rltrack.make_logger({
        "run": {"root": str(root), "name": "merged", "task": "merge", "close_timeout": None},
        "backends": {"use": ["local", "mlflow", "trackio"]},
    }) as logger:  # fmt: skip
        for i in range(50):
            logger.write({"reward": float(i)}, step=i, namespace="collector")
    expected = [(i, float(i)) for i in range(50)]
    assert _mlflow_values(root / "mlflow.db", "collector/reward") == {"merged": expected}
    config = tmp_path / "shared.toml"
    config.write_text(f'[backends.mlflow]\ntracking_uri = "sqlite:///{shared / "mlflow.db"}"\n[backends.trackio]\ndir = "{shared / "trackio"}"\n')

    for attempt in (1, 2):
        done = sync_command(str(logger.run_dir), "--to", "mlflow", "--to", "trackio", "--config", str(config))
        assert done.returncode == 0, done.stderr
        assert ("nothing pending" in done.stderr) == (attempt == 2), done.stderr
        assert _mlflow_values(shared / "mlflow.db", "collector/reward") == {"merged": expected}
        (rows,) = store(shared / "trackio", "merge")["logs"].values()
        assert sorted((row["step"], row["collector/reward"]) for row in rows if "collector/reward" in row) == expected
    home = sync_command(str(logger.run_dir), "--to", "mlflow", "--to", "trackio")  # the run's own stores: already there
    assert home.returncode == 0 and home.stderr.count("nothing pending") == 2, home.stderr
    assert _mlflow_values(root / "mlflow.db", "collector/reward") == {"merged": expected}
    (rows,) = store(root / "trackio", "merge")["logs"].values()
    assert len([row for row in rows if "collector/reward" in row]) == 50
