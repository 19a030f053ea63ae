"""`make_logger(resume=...)`: a run stopped and resumed twice stays one run
everywhere: one run directory whose journal, text log and progress.csv carry
on, one MLflow run (in a real SQLite store) whose steps are strictly ordered
and complete, W&B rows all under one run id, and steps never going backwards."""

from __future__ import annotations

import csv
import json

import pytest
import wandb_reader
from mlflow.tracking import MlflowClient

import rltrack
import rltrack.runs
from rltrack import ConfigError

SEGMENTS = [(0, 30), (30, 55), (55, 80)]  # steps written by the first run and each resumption


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    with pytest.MonkeyPatch.context() as mp:
        for var in ("WANDB_API_KEY", "RLTRACK_BACKENDS", "RLTRACK_CONFIG"):
            mp.delenv(var, raising=False)
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        mp.setenv("HOME", str(root / "home"))
        config = {
            "run": {"root": str(root), "name": "long_job", "tracked": ["lr"]},
            "backends": {"use": ["local", "mlflow", "wandb"], "wandb": {"project": "resume"}},
        }
        run_dir = None
        for index, (start, stop) in enumerate(SEGMENTS):
            with rltrack.make_logger(config, resume=run_dir) as log:
                if index == 0:
                    log.log_hparams({"lr": 0.01})
                for step in range(start, stop):
                    log.write({"loss": 1.0 / (step + 1), "reward": float(step)}, step=step, namespace="learner")
                log.write({"note_free": float(index)}, namespace="counter")  # no step: numbered per namespace
                log.dump()
                assert log.close(timeout=120)  # every tracker has the segment before the next one resumes (5 s raced a busy agent)
            assert run_dir is None or log.run_dir == run_dir
            run_dir = log.run_dir
    return root, run_dir


def test_one_directory_whose_files_carry_on(resumed_run):
    root, run_dir = resumed_run
    assert [p.name for p in root.iterdir() if (p / "meta.json").is_file()] == ["long_job"]
    learner = [e for e in rltrack.read_journal(run_dir) if e.namespace == "learner"]
    assert [e.steps["step"] for e in learner] == list(range(SEGMENTS[-1][1]))
    counter = [e for e in rltrack.read_journal(run_dir) if e.namespace == "counter"]
    # a step-less record takes the last step given, on resume too: never lower than before
    assert [e.steps["step"] for e in counter] == [stop - 1 for _, stop in SEGMENTS]
    with (run_dir / "progress.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted({float(r["learner/reward"]) for r in rows if r.get("learner/reward")}) == [float(s) for s in range(80)]
    text = (run_dir / "log" / "learner" / "learner_logger.txt").read_text()
    assert "step=29" in text and "step=54" in text and "step=79" in text  # each segment's last table, appended
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "finished"
    assert [r["previous_status"] for r in meta["resumed"]] == ["finished", "finished"]
    assert meta["tracked"] == {"lr": 0.01}  # hparams of the first segment survive resumption
    assert "'lr': 0.01" in (run_dir / "total_config.py").read_text()


def test_the_experiment_index_shows_one_run_and_resumes_it_by_id(resumed_run):
    root, run_dir = resumed_run
    table = rltrack.runs.query(root)
    assert list(table["path"]) == ["long_job"] and table["status"].iloc[0] == "finished"
    run_id = table["id"].iloc[0]
    with rltrack.make_logger({"run": {"root": str(root)}, "backends": {"use": ["local"]}}, resume=run_id) as log:
        log.write({"reward": 80.0}, step=80, namespace="learner")
    assert log.run_dir.resolve() == run_dir.resolve()
    assert len(rltrack.runs.query(root)) == 1


def test_one_mlflow_run_with_every_step_once_in_order(resumed_run):
    root, run_dir = resumed_run
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1
    run = runs[0]
    history = client.get_metric_history(run.info.run_id, "learner/reward")
    assert [m.step for m in history] == list(range(80))
    assert [m.value for m in history] == [float(s) for s in range(80)]
    assert run.info.status == "FINISHED"
    assert run.data.params["lr"] == "0.01"


def test_one_wandb_run_id_holding_every_row(resumed_run):
    _, run_dir = resumed_run
    files = wandb_reader.run_files(run_dir)
    assert len(files) == len(SEGMENTS)  # offline mode writes one file per process, all of one run id
    assert len({f.name for f in files}) == 1
    rewards = [row["learner/reward"] for f in files for row in wandb_reader.history(f) if "learner/reward" in row]
    assert rewards == [float(s) for s in range(80)]


def test_resume_of_something_that_is_no_run_names_it(tmp_path):
    (tmp_path / "not_a_run").mkdir()
    with pytest.raises(ConfigError, match="not_a_run"):
        rltrack.make_logger({"run": {"root": str(tmp_path)}}, resume=tmp_path / "not_a_run")
