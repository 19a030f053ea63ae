"""skrl -> rltrack: `rltrack.adapters.skrl.attach(trainer)` on skrl's own PPO
(its `SequentialTrainer`, its writer) on gymnasium's CartPole-v1 with 2
environments, read back from progress.csv, MLflow (`MlflowClient`) and W&B's
run file: every value skrl's writer was given, under skrl's tag, at
`env_steps` = the transitions made as CleanRL counts them (`num_envs` per
step of the vector environment, counted by a wrapper around it), the configurations as typed hyperparameters, the run
named after skrl's experiment; skrl's own event file as before, and one run
only under the TensorBoard hook of `rltrack run`."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("skrl", reason="skrl is not installed (requirements/test.txt; not in the oldest lane)")
from library_readback import assert_once_everywhere, config, tracker_hparams  # noqa: E402
from skrl_task import NUM_ENVS, Counted, ppo_trainer  # noqa: E402

import rltrack  # noqa: E402
from rltrack.adapters import tensorboard as tensorboard_hook  # noqa: E402
from rltrack.adapters.skrl import CANONICAL, attach  # noqa: E402

from skrl_task import TIMESTEPS, WRITE_INTERVAL  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def recording(writer) -> list[tuple[str, float, int, int]]:
    """What skrl hands its writer: (tag, value, timestep, transitions counted so far)."""
    calls: list[tuple[str, float, int, int]] = []
    add_scalar = writer.add_scalar

    def add_and_note(*, tag, value, timestep):
        calls.append((tag, float(value), timestep, Counted.transitions))
        add_scalar(tag=tag, value=value, timestep=timestep)

    writer.add_scalar = add_and_note
    return calls


@pytest.mark.slow
def test_ppo_values_reach_every_tracker_at_the_transitions_made(tmp_path):
    trainer = ppo_trainer()
    calls = recording(trainer.agents.writer)
    logger = attach(trainer, config=config(tmp_path / "runs"))
    trainer.train()
    logger.close()
    assert {timestep for _, _, timestep, _ in calls} == set(range(WRITE_INTERVAL, TIMESTEPS + 1, WRITE_INTERVAL))
    assert all(counted == timestep * NUM_ENVS for _, _, timestep, counted in calls)  # env_steps: transitions across the envs
    assert {"Reward / Total reward (mean)", "Loss / Policy loss", "Loss / Value loss"} <= {t for t, *_ in calls}
    numbers = [call for call in calls if not math.isnan(call[1])]  # a categorical policy's `Policy / Standard deviation` is NaN: an empty csv cell
    assert len(numbers) >= len(calls) - TIMESTEPS // WRITE_INTERVAL
    logged = [(tag, "env_steps", timestep * NUM_ENVS, value) for tag, value, timestep, _ in numbers]
    logged += [(CANONICAL[tag], "env_steps", timestep * NUM_ENVS, value) for tag, value, timestep, _ in numbers if tag in CANONICAL]
    run_dir = logger.run_dir
    assert run_dir.name == "cartpole_ppo"
    assert_once_everywhere(run_dir, logged)
    timesteps = {e.steps["timestep"] for e in rltrack.read_journal(run_dir) if e.source == "skrl"}
    assert timesteps == {timestep for _, _, timestep, _ in calls}  # skrl's own count beside env_steps

    params, wandb_config = tracker_hparams(run_dir)
    assert wandb_config["rollouts"] == 64 and wandb_config["num_envs"] == NUM_ENVS and wandb_config["timesteps"] == TIMESTEPS
    assert wandb_config["headless"] is True and wandb_config["learning_rate"] == list(trainer.agents.cfg.learning_rate)
    assert wandb_config["discount_factor"] == trainer.agents.cfg.discount_factor and isinstance(wandb_config["discount_factor"], float)
    assert params["experiment/experiment_name"] == "cartpole_ppo" and params["learning_epochs"] == "2"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["info"]["framework"] == "skrl" and meta["info"]["agent"] == "PPO"

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (event_file,) = (tmp_path / "skrl_runs" / "cartpole_ppo").glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(event_file)).Reload()
    assert sum(len(accumulator.Scalars(tag)) for tag in accumulator.Tags()["scalars"]) == len(calls)  # skrl's own file as before


@pytest.mark.slow
def test_under_the_tensorboard_hook_the_values_reach_one_run_once(tmp_path):
    """`rltrack run` hooks every TensorBoard writer of the process: the attached
    writer's values reach the attached run only (once); the hook opens no run for them."""
    opened = []

    def open_logger(logdir):
        opened.append(logdir)
        return rltrack.make_logger(run={"root": str(tmp_path / "hooked"), "name": "hooked"}, backends={"use": ["memory"]})

    tensorboard_hook.attach(open_logger)
    try:
        trainer = ppo_trainer("hooked_ppo")
        calls = recording(trainer.agents.writer)
        logger = attach(trainer, run={"root": str(tmp_path / "runs")}, backends={"use": ["memory"]})
        trainer.cfg.timesteps = 2 * WRITE_INTERVAL
        trainer.train()
        logger.close()
    finally:
        tensorboard_hook.detach()
    assert opened == []
    native = [(tag, e.steps["env_steps"], e.data[tag]) for e in logger.backends["memory"].events if e.namespace == "" and e.kind == "scalars" for tag in e.data]
    assert [(tag, step, repr(value)) for tag, step, value in native] == [(tag, timestep * NUM_ENVS, repr(value)) for tag, value, timestep, _ in calls]  # nan too
    (event_file,) = (tmp_path / "skrl_runs" / "hooked_ppo").glob("events.out.tfevents.*")
    assert event_file.stat().st_size > 100  # skrl's own event file still written
