"""rl_games -> rltrack: `rltrack.adapters.rl_games.RLTrackObserver` as the
`algo_observer` of rl_games' own `Runner` (PPO, `a2c_discrete`, on gymnasium's
CartPole-v1 through tests/helpers/rl_games_task.py): the run named after
rl_games' experiment, its config as typed hyperparameters in MLflow and W&B,
and every scalar of rl_games' own event file in both trackers through the
TensorBoard hook, in one run; under `rltrack run` too."""

from __future__ import annotations

import json
import subprocess

import pytest

pytest.importorskip("rl_games", reason="rl_games is not installed (requirements/test.txt, --no-deps; not in the oldest lane)")
import rl_games_task  # noqa: E402
from library_readback import config, tracker_hparams  # noqa: E402
from reliability_helpers import PYTHON, child_env  # noqa: E402
from tracker_scalars import event_file_scalars, expected_in_trackers, mlflow_scalars, wandb_scalars  # noqa: E402

from rltrack.adapters import tensorboard as tensorboard_hook  # noqa: E402
from rltrack.adapters.rl_games import RLTrackObserver  # noqa: E402
from rltrack.trackers.mlflow.batch import mlflow_key  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    yield
    tensorboard_hook.detach()


def assert_event_file_in_trackers(summaries, run_dir) -> None:
    """Every scalar of rl_games' event file in MLflow and W&B, at its step, under its stored name."""
    expected = expected_in_trackers(event_file_scalars(summaries))
    assert {"losses/a_loss", "performance/step_fps", "info/last_lr"} <= set(event_file_scalars(summaries))
    held_mlflow, held_wandb = mlflow_scalars(run_dir), wandb_scalars(run_dir, "env_steps", "train_iter", "step")
    for name, points in expected.items():
        assert held_mlflow.get(mlflow_key(name)) == points, ("mlflow", name, held_mlflow.get(mlflow_key(name)), points)
        assert held_wandb.get(name) == points, ("wandb", name, held_wandb.get(name), points)


@pytest.mark.slow
def test_ppo_run_named_after_its_experiment_with_its_config_and_every_scalar(tmp_path):
    observer = RLTrackObserver(config(tmp_path / "runs"))
    runner = rl_games_task.train(observer, name="cartpole_ppo", full_experiment_name="cartpole_ppo_seed0")
    observer.writer.close()  # rl_games leaves its writer open (its file is flushed every 120 s, or at exit)
    tensorboard_hook.detach()
    observer.logger.close()
    run_dir = observer.logger.run_dir
    assert run_dir.name == "cartpole_ppo_seed0"  # rl_games' full_experiment_name, its own folder's name
    assert (tmp_path / "rl_games_runs" / "cartpole_ppo_seed0" / "summaries").is_dir()
    assert [p.name for p in (tmp_path / "runs").iterdir() if (p / "meta.json").is_file()] == ["cartpole_ppo_seed0"]  # one run

    params, wandb_config = tracker_hparams(run_dir)
    assert wandb_config["horizon_length"] == rl_games_task.HORIZON and wandb_config["num_actors"] == rl_games_task.NUM_ACTORS
    assert wandb_config["gamma"] == 0.99 and wandb_config["normalize_advantage"] is True and wandb_config["name"] == "cartpole_ppo"
    assert wandb_config["reward_shaper"]["scale_value"] == 0.1  # rl_games' shaper object, built from the config's dict
    assert params["learning_rate"] == "0.0002" and params["reward_shaper/scale_value"] == "0.1" and "features" not in wandb_config
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["info"]["framework"] == "rl_games" and meta["info"]["rl_games_version"] == "1.6.5"
    assert_event_file_in_trackers(tmp_path / "rl_games_runs" / "cartpole_ppo_seed0" / "summaries", run_dir)
    assert runner.algo_observer is observer


@pytest.mark.slow
def test_without_a_full_name_the_run_is_rl_games_experiment_folder(tmp_path):
    observer = RLTrackObserver(run={"root": str(tmp_path / "runs")}, backends={"use": ["memory"]})
    rl_games_task.train(observer, name="cartpole", epochs=1)
    tensorboard_hook.detach()
    observer.logger.close()
    (folder,) = (tmp_path / "rl_games_runs").iterdir()  # `cartpole_<day>-<hour>-<minute>-<second>`
    assert folder.name.startswith("cartpole_") and observer.logger.run_dir.name == folder.name
    assert any(e.kind == "scalars" for e in observer.logger.backends["memory"].events)


SCRIPT = """
import rl_games_task
from rltrack.adapters.rl_games import RLTrackObserver
rl_games_task.train(RLTrackObserver(), name="launched", full_experiment_name="launched_ppo", epochs=2)
"""


@pytest.mark.slow
def test_under_rltrack_run_the_observer_names_the_hooked_run_and_gives_its_config(tmp_path):
    """`rltrack run` hooks every TensorBoard writer and would name the run after rl_games'
    fixed `summaries` folder: with the observer, the process has one run, named
    `full_experiment_name`, holding the config and the scalars, with rltrack run's config."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (tmp_path / "rltrack.toml").write_text(f'[run]\nroot = "{tmp_path / "rl"}"\n\n[backends]\nuse = ["local", "wandb"]\n')
    command = [PYTHON, "-m", "rltrack.cli", "run", "--config", str(tmp_path / "rltrack.toml"), "--", PYTHON, "-c", SCRIPT]
    done = subprocess.run(command, capture_output=True, text=True, env=child_env(home), timeout=900, cwd=work, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p.parent for p in (tmp_path / "rl").glob("*/meta.json")]
    assert run_dir.name == "launched_ppo"
    import rltrack

    events = list(rltrack.read_journal(run_dir))
    [hparams] = [e.data for e in events if e.kind == "hparams"]
    assert hparams["horizon_length"] == rl_games_task.HORIZON and hparams["full_experiment_name"] == "launched_ppo"
    expected = expected_in_trackers(event_file_scalars(work / "rl_games_runs" / "launched_ppo" / "summaries"))
    journaled = {e.tag(key) for e in events if e.kind == "scalars" for key in e.data}
    assert set(expected) <= journaled
