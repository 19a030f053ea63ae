"""Stoix -> rltrack: `rltrack.adapters.stoix.RLTrackLogger` made by Hydra's own
`instantiate` from a logger config laid out as Stoix's
`stoix/configs/logger/logger.yaml`, called as Stoix's `StoixLogger` and
`MultiLogger` call their loggers, every value read back from progress.csv,
MLflow and W&B's run file.

Stoix itself is not on the package index (it is run from its repository, with
pins of its own), so the calls are Stoix's as its source makes them
(`stoix/utils/logger.py`: `_make_multi_logger` instantiates each enabled
entry with `base_exp_path`, `unique_token`, `system_name`; `StoixLogger._log`
reduces acting and evaluation metrics with `describe` to mean/std/min/max and
training metrics to means, then `log_dict(metrics, t, t_eval, event)`), on
metrics a jitted JAX step computes.
"""

from __future__ import annotations

import enum
import json

import pytest

hydra = pytest.importorskip("hydra", reason="hydra-core is not installed (requirements/test.txt)")
jax = pytest.importorskip("jax", reason="jax is not installed (requirements/test.txt)")
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from library_readback import assert_once_everywhere, config  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from rltrack.adapters.stoix import CANONICAL, RLTrackLogger  # noqa: E402
from rltrack.delivery.cursor import tracker_state  # noqa: E402


class LogEvent(enum.Enum):
    """Stoix's `stoix.utils.logger.LogEvent`, as its source defines it."""

    ACT = "actor"
    TRAIN = "trainer"
    EVAL = "evaluator"
    ABSOLUTE = "absolute"
    MISC = "misc"


def describe(x):
    """Stoix's `describe`: an array as its mean, std, min and max; a 0-d value as it is."""
    if not isinstance(x, (jax.Array, np.ndarray)) or x.ndim == 0:
        return x
    return {"mean": np.mean(x), "std": np.std(x), "min": np.min(x), "max": np.max(x)}


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@jax.jit
def _rollout(key):
    """One 'update': per-environment episode returns and lengths, and two losses."""
    returns = jax.random.normal(key, (8,)) * 10 + 100
    return {"episode_return": returns, "episode_length": jnp.round(returns / 2)}, {"total_loss": jnp.mean(returns) / 1000, "actor_loss": -jnp.std(returns) / 100}


@pytest.mark.slow  # MLflow and W&B deliveries
def test_hydra_instantiated_logger_gets_stoix_calls_into_every_tracker(tmp_path):
    cfg = OmegaConf.create({
        "system": {"system_name": "ff_ppo", "actor_lr": 3e-4, "rollout_length": 8, "normalize_advantages": True},
        "arch": {"seed": 42, "total_timesteps": 4096, "num_evaluation": 2},
        "logger": {"base_exp_path": str(tmp_path / "results"), "loggers": {
            "tensorboard": {"_target_": "stoix.utils.logger.TensorboardLogger", "enabled": False},  # disabled: never imported
            "rltrack": {"_target_": "rltrack.adapters.stoix.RLTrackLogger", "enabled": True, "config": config(tmp_path / "runs")},
        }},
    })  # fmt: skip
    loggers = []
    for entry in cfg.logger.loggers.values():  # Stoix's _make_multi_logger
        entry = dict(entry)
        if entry.pop("enabled", True):
            loggers.append(hydra.utils.instantiate(entry, base_exp_path=cfg.logger.base_exp_path, unique_token="20261129063000",
                                                   system_name=cfg.system.system_name))  # fmt: skip
    (logger,) = loggers
    assert isinstance(logger, RLTrackLogger)
    logger.log_config(OmegaConf.to_container(cfg, resolve=True))
    sent = []  # what Stoix's loggers were handed: (stored name, t, t_eval, value)
    key = jax.random.PRNGKey(0)
    for eval_step in range(2):
        t = 2048 * (eval_step + 1)
        key, rollout_key, eval_key = jax.random.split(key, 3)
        episode, losses = _rollout(rollout_key)
        for event, metrics in ((LogEvent.ACT, jax.tree.map(describe, episode)), (LogEvent.TRAIN, jax.tree.map(np.mean, losses)),
                               (LogEvent.EVAL, jax.tree.map(describe, _rollout(eval_key)[0]))):  # fmt: skip
            logger.log_dict(metrics, t, eval_step, event)
            sent += [(f"{event.value}/{name}/{stat}" if isinstance(stats, dict) else f"{event.value}/{name}", t, eval_step, float(value))
                     for name, stats in metrics.items() for stat, value in (stats.items() if isinstance(stats, dict) else [(None, stats)])]  # fmt: skip
    logger.log_stat("steps_per_second", np.float32(1234.5), 4096, 1, LogEvent.MISC)
    sent.append(("misc/steps_per_second", 4096, 1, 1234.5))
    logger.stop()
    run_dir = logger.run_dir
    assert run_dir.name == "ff_ppo_20261129063000"
    logged = [(name, "env_steps", t, value) for name, t, _, value in sent]
    logged += [(CANONICAL[name], "env_steps", t, value) for name, t, _, value in sent if name in CANONICAL]
    assert {"actor/episode_return/mean", "trainer/total_loss", "evaluator/episode_length/max"} <= {name for name, *_ in sent}
    assert_once_everywhere(run_dir, logged)
    from mlflow import MlflowClient

    state = tracker_state(run_dir, "mlflow")
    params = MlflowClient(state["tracking_uri"]).get_run(state["run_id"]).data.params
    assert {k: params[k] for k in ("system/actor_lr", "system/normalize_advantages", "arch/seed")} == {
        "system/actor_lr": "0.0003", "system/normalize_advantages": "True", "arch/seed": "42"}
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["info"]["stoix_system"] == "ff_ppo"
    assert not json.loads((run_dir / "report.json").read_text()).get("converted")  # numpy and jax scalars: no notice


def test_eval_step_is_a_second_axis_and_an_event_may_be_its_value(tmp_path):
    import rltrack

    logger = RLTrackLogger("results", "20261129", "ff_dqn", run={"root": str(tmp_path)}, backends={"use": ["memory"]})
    logger.log_stat("episode_return/mean", jnp.float32(7.5), 1000, 3, "evaluator")
    logger.stop()
    [event] = [e for e in rltrack.read_journal(logger.run_dir) if e.kind == "scalars" and e.namespace == "evaluator" and "episode_return/mean" in e.data]
    assert event.steps == {"env_steps": 1000, "t_eval": 3} and event.data["episode_return/mean"] == 7.5
