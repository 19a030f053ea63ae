"""Runs grouped the way RL users compare them, in the run index and in every tracker.

The examples run as a user runs them (a child process per seed), with MLflow
on SQLite, W&B offline and trackio; then each store is read back: MLflow
through its client, W&B from its `.wandb` run record, trackio through its own
SQLite storage. A Tune grid runs in-process (real `tune.Tuner`) and is
restored after a trial failed: the restarted trial continues its own run.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trackio_reader
import wandb_reader
from reliability_helpers import PYTHON, REPO, child_env, sync_run

import rltrack.runs as runs
from rltrack.runs.plot import plot_runs

TRACKERS = "local,mlflow,wandb,trackio"


def _run_example(script: str, home: Path, *args: str) -> None:
    done = subprocess.run(
        [PYTHON, str(REPO / "examples" / script), *args], capture_output=True, text=True,
        env=child_env(home, RLTRACK_BACKENDS=TRACKERS), timeout=600, cwd=home,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def _synced(root: Path, home: Path) -> list[Path]:
    """Every rltrack run under `root`, each with every tracker delivered (what
    the agent has not finished yet, `rltrack sync` does)."""
    run_dirs = sorted(p.parent for p in root.glob("**/meta.json"))
    for run_dir in run_dirs:
        done = sync_run(run_dir, home)
        assert done.returncode == 0, done.stderr
    return run_dirs


def _mlflow_runs(root: Path) -> dict[str, list[str]]:
    """experiment name -> the names of its runs, in the store `<root>/mlflow.db`."""
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    return {
        e.name: sorted(r.info.run_name for r in client.search_runs([e.experiment_id]))
        for e in client.search_experiments()
        if e.name != "Default"
    }


def _wandb_runs(run_dirs: list[Path]) -> dict[str, dict[str, Any]]:
    """run directory name -> project, group, name and id of each W&B session's run record."""
    out: dict[str, dict[str, Any]] = {}
    for run_dir in run_dirs:
        records = [wandb_reader.of_type(path, "run")[0] for path in wandb_reader.run_files(run_dir)]
        assert records, f"{run_dir} has no W&B files"
        out[run_dir.name] = {
            "project": {r.project for r in records}, "group": {r.run_group for r in records},
            "name": {r.display_name for r in records}, "id": {r.run_id for r in records}, "sessions": len(records),
        }  # fmt: skip
    return out


def _index(root: Path) -> dict[str, str]:
    table = runs.query(root)
    return dict(zip((Path(p).name for p in table["path"]), table["task"]))


def _assert_one_experiment(root: Path, run_dirs: list[Path], task: str, names: list[str]) -> dict[str, dict[str, Any]]:
    """The runs `names` are the one experiment `task` in the index, MLflow, W&B and trackio; returns what W&B holds."""
    assert sorted(d.name for d in run_dirs) == names
    assert _index(root) == dict.fromkeys(names, task)
    assert _mlflow_runs(root) == {task: names}
    wandb_runs = _wandb_runs(run_dirs)
    for name, found in wandb_runs.items():
        assert found["project"] == found["group"] == {task} and found["name"] == {name} and len(found["id"]) == 1
    assert trackio_reader.projects(root / "trackio") == [task]
    assert sorted(trackio_reader.store(root / "trackio", task)["runs"]) == names
    return wandb_runs


@pytest.mark.slow
def test_two_seeds_of_the_sb3_example_are_one_experiment_in_every_tracker(tmp_path: Path) -> None:
    """Run names differ per seed (`sb3_s0`, `sb3_s1`); the task is the script's name."""
    root = tmp_path / "runs"
    for seed in (0, 1):
        _run_example("sb3_ppo_cartpole.py", tmp_path, "--timesteps", "512", "--seed", str(seed), "--name", f"sb3_s{seed}",
                     "--root", str(root), "--backends", TRACKERS)  # fmt: skip
    _assert_one_experiment(root, _synced(root, tmp_path), "sb3_ppo_cartpole", ["sb3_s0", "sb3_s1"])


@pytest.mark.slow
def test_two_seeds_of_the_spinup_example_are_one_experiment_named_by_exp_name(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for seed in (0, 1):
        _run_example("spinup_style_vpg.py", tmp_path, "--epochs", "2", "--steps", "300", "--seed", str(seed), "--root", str(root))
    run_dirs = _synced(root, tmp_path)
    _assert_one_experiment(root, run_dirs, "vpg", ["vpg_s0", "vpg_s1"])
    # save_config(locals()) holds the logger and the per-seed output_dir: neither is a hyperparameter
    columns = list(runs.query(root).columns)
    assert "seed" in columns and "pi_lr" in columns
    assert not [c for c in columns if "0x" in c or "output_dir" in c or c.split("/")[0] in ("logger", "logger_kwargs")], columns
    # nor in the trackers: MLflow's parameters and W&B's config hold the hyperparameters alone
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "vpg"]
    for found in client.search_runs([experiment.experiment_id]):
        assert found.data.params["pi_lr"] == "0.003" and found.data.params["seed"] in ("0", "1")
        assert not [k for k in found.data.params if "0x" in k or k.split("/")[0] in ("logger", "logger_kwargs", "exp_name")], found.data.params
    for run_dir in run_dirs:
        (path,) = wandb_reader.run_files(run_dir)
        config_keys = set(wandb_reader.config(path))
        assert "pi_lr" in config_keys and not config_keys & {"logger", "logger_kwargs", "exp_name"}, config_keys
    (curve,) = plot_runs([runs.load(d) for d in run_dirs], "collector/reward_mean").curves
    assert curve.label == "all runs" and len(curve.runs) == 2  # the two seeds: one mean, one band


@pytest.mark.slow
def test_a_tune_grid_is_one_experiment_and_a_restored_trial_continues_its_run(tmp_path: Path, ray_cluster) -> None:
    from ray import tune
    from ray_versions import RunConfig, report

    from rltrack.adapters.tune import RLTrackCallback

    def flaky_trainable(config: dict) -> None:
        """Fails once at iteration 3 when `config["fail_once"]` names a file that does not exist yet
        (defined here: Ray pickles it by value, and the workers cannot import this test module)."""
        marker = Path(f"{config['fail_once']}_{config['lr']}") if config["fail_once"] else None
        for i in range(1, 5):
            if i == 3 and marker is not None and not marker.exists():
                marker.write_text("failed once")
                raise RuntimeError("first attempt fails at iteration 3")
            report({"loss": config["lr"] / i, "timesteps_this_iter": 100})

    root, home = tmp_path / "runs", tmp_path
    callback = RLTrackCallback(run={"root": str(root)}, backends={"use": TRACKERS.split(",")})
    marker = str(tmp_path / "failed_once")
    tuner = tune.Tuner(
        flaky_trainable,
        param_space={"lr": tune.grid_search([0.01, 0.1]), "fail_once": tune.grid_search(["", marker])},
        run_config=RunConfig(name="toy_grid", storage_path=str(tmp_path / "ray_results"), callbacks=[callback], verbose=0),
    )
    first = tuner.fit()
    assert len(first.errors) == 2  # the two trials with fail_once
    restored = tune.Tuner.restore(str(tmp_path / "ray_results" / "toy_grid"), flaky_trainable, resume_errored=True)
    assert not restored.fit().errors
    run_dirs = _synced(root, home)
    assert len(run_dirs) == 4, run_dirs  # one run per trial, restored or not
    assert runs.query(root, task="toy_grid*").shape[0] == 4
    wandb_runs = _assert_one_experiment(root, run_dirs, "toy_grid", sorted(d.name for d in run_dirs))
    assert sorted(found["sessions"] for found in wandb_runs.values()) == [1, 1, 2, 2]  # the restored trials resumed their W&B run
    for run_dir in run_dirs:
        meta = json.loads((run_dir / "meta.json").read_text())
        assert meta["status"] == "finished", run_dir
        restarted = bool(meta.get("resumed"))
        frame = runs.load(run_dir).df
        steps = sorted(frame[frame["key"] == "loss"]["train_iter"].dropna().astype(int))
        # the restored trial holds both attempts (iterations 1-2, then 1-4 again), in one run
        assert steps == ([1, 1, 2, 2, 3, 4] if restarted else [1, 2, 3, 4]), (run_dir, steps)
    assert sum(bool(json.loads((d / "meta.json").read_text()).get("resumed")) for d in run_dirs) == 2
