"""Ray Tune / RLlib adapter: real `tune.run`, real `tune.Tuner`, real RLlib PPO on CartPole.

Ray's start-up is slow (~30 s on a 2-core machine), so the tests that need a
running Ray share one `ray.init` through the session-scoped `ray_cluster`
fixture (tests/conftest.py). The tests above it need no Ray session (they feed `log_result`
result dicts shaped like RLlib's and Tune's).
"""

from __future__ import annotations

import ast
import json
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import rltrack
from rltrack.adapters import tune as adapter
from rltrack.frameworks.canonical import vocabulary
from waiting import wait_until
from rltrack.delivery.cursor import tracker_state

RUN_INFO_COLUMNS = ["trial_id", "hostname", "pid", "date", "timestamp", "done", "node_ip", "training_iteration",
                    "iterations_since_restore", "checkpoint_dir_name", "config/lr", "config"]


def _meta(run_dir: Path) -> dict:
    return json.loads((run_dir / "meta.json").read_text())


def _hparams(run_dir: Path) -> dict:
    return ast.literal_eval((run_dir / "total_config.py").read_text())["hparams"]


def _tags(events) -> set[str]:
    return {e.tag(k) for e in events for k in e.data}


def _result(iteration: int, **extra):
    """A result dict shaped like RLlib 2.60's `algo.train()` (new API stack)."""
    result = {
        "env_runners": {
            "episode_return_mean": 10.0 * iteration,
            "num_env_steps_sampled_lifetime": float(200 * iteration),
            "env_step_timer": 0.0001,
            "module_to_env_connector": {"timers": {"connectors": {"get_actions": 0.0002}}},
        },
        "learners": {"default_policy": {"total_loss": 1.0 / iteration, "vf_loss": 0.5}, "p1": {"policy_loss": 0.25}},
        "timers": {"training_iteration": 0.5},
        "training_iteration": iteration,
        "trial_id": "default",
        "hostname": "host",
        "pid": 123,
        "date": f"2026-01-0{iteration}",
        "timestamp": 1000 + iteration,
        "done": False,
        "time_this_iter_s": 0.5,
        "config": {"lr": 5e-5, "gamma": 0.99},
    }
    result.update(extra)
    return result


def _memory_logger(tmp_path: Path, names: str = "both"):
    return rltrack.make_logger(run={"root": str(tmp_path), "name": "r", "names": names}, backends={"use": ["memory"]})


# ---- without a Ray session --------------------------------------------------------


def test_log_result_maps_rllib_keys_steps_bookkeeping_and_kinds(tmp_path: Path) -> None:
    logger = _memory_logger(tmp_path)
    adapter.log_result(logger, _result(1))
    adapter.log_result(logger, _result(2, evaluation={"env_runners": {"episode_return_mean": 42.0}}))
    logger.close()
    memory = logger.backends["memory"]
    scalars = [e for e in memory.events if e.kind in ("scalars", "timing")]
    assert {e.source for e in scalars} == {"rllib"}
    assert all(e.preaggregated == ("time_this_iter_s" not in e.data) for e in scalars)  # Tune's own timing is raw
    assert memory.metrics["collector/reward_mean"] == [10.0, 20.0]
    assert memory.metrics["env_runners/episode_return_mean"] == [10.0, 20.0]  # native kept ("both")
    assert memory.steps["collector/reward_mean"] == [200, 400]  # env_steps is the primary axis
    assert all(list(e.steps) == ["env_steps", "train_iter"] for e in scalars)
    assert memory.metrics["learner/total_loss_avg"] == [1.0, 0.5]
    assert memory.metrics["learner/value_loss_avg"] == [0.5, 0.5]
    assert memory.metrics["learner/p1/policy_loss_avg"] == [0.25, 0.25]  # a second module
    assert memory.metrics["evaluator/reward_mean"] == [42.0]  # the late key, at iteration 2
    assert memory.steps["evaluator/reward_mean"] == [400]
    timing = _tags(e for e in memory.events if e.kind == "timing")
    assert timing == {"timers/training_iteration", "env_runners/env_step_timer",
                      "env_runners/module_to_env_connector/timers/connectors/get_actions", "time_this_iter_s"}
    metric_tags = _tags(scalars)
    assert not {t for t in metric_tags for c in RUN_INFO_COLUMNS if t == c or t.startswith("config/")}
    hparams = [e for e in memory.events if e.kind == "hparams"]
    assert len(hparams) == 1 and hparams[0].data == {"lr": 5e-5, "gamma": 0.99}
    info = _meta(logger.run_dir)["info"]
    assert info["framework"] == "rllib" and info["trial_id"] == "default" and info["pid"] == 123
    assert info["date"] == "2026-01-02" and info["timestamp"] == 1002 and info["done"] is False


def test_names_canonical_replaces_and_native_keeps_only_rllib_keys(tmp_path: Path) -> None:
    for names, present, absent in (
        ("canonical", {"collector/reward_mean", "learner/total_loss_avg"}, {"env_runners/episode_return_mean"}),
        ("native", {"env_runners/episode_return_mean", "learners/default_policy/total_loss"}, {"collector/reward_mean"}),
    ):
        logger = _memory_logger(tmp_path / names, names)
        adapter.log_result(logger, _result(1))
        logger.close()
        tags = _tags(logger.backends["memory"].events)
        assert present <= tags and not absent & tags, names
        assert "learners/default_policy/policy_loss" not in tags  # not reported: nothing invented


def test_plain_tune_result_non_numeric_values_and_late_keys_in_progress_csv(tmp_path: Path) -> None:
    logger = rltrack.make_logger(run={"root": str(tmp_path), "name": "plain"}, backends={"use": ["memory", "local"]})

    class Opaque:
        def __str__(self) -> str:
            return "opaque-object"

    for i in (1, 2, 3):
        result = {"loss": 1.0 / i, "nested": {"acc": 0.1 * i}, "phase": f"it{i}", "weights": [0.1, 0.2 * i],
                  "thing": Opaque(), "training_iteration": i, "trial_id": "t", "done": i == 3, "time_total_s": 0.1 * i}
        if i == 3:
            result["late"] = 7.0
        adapter.log_result(logger, result)
    logger.close()
    events = logger.backends["memory"].events
    assert {e.source for e in events if e.kind != "hparams"} == {"tune"}
    assert not any(e.preaggregated for e in events)
    assert not [e for e in events if e.kind == "timing"]  # time_total_s is a running clock, not a stage's duration
    texts = [e.data for e in events if e.kind == "text"]
    assert [t["phase"] for t in texts] == ["it1", "it2", "it3"] and texts[0]["thing"] == "opaque-object"
    assert [e.data["weights"] for e in events if e.kind == "histogram"] == [[0.1, 0.2], [0.1, 0.4], [0.1, 0.6000000000000001]]
    assert all(e.steps == {"train_iter": i} for i, e in zip((1, 2, 3), (e for e in events if e.kind == "text")))
    df = pd.read_csv(logger.run_dir / "progress.csv")
    assert list(df["train_iter"]) == [1, 2, 3]
    assert df["loss"].tolist() == pytest.approx([1.0, 0.5, 1 / 3])
    assert df["nested/acc"].tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert df["late"].isna().tolist() == [True, True, False] and df["late"].iloc[2] == 7.0
    assert not set(RUN_INFO_COLUMNS) & set(df.columns)
    assert _meta(logger.run_dir)["info"]["done"] is True


def test_bookkeeping_is_sent_only_when_it_changes(tmp_path: Path) -> None:
    logger = _memory_logger(tmp_path)
    sent = []
    real = logger.set_run_info
    logger.set_run_info = lambda info: (sent.append(dict(info)), real(info))  # type: ignore[method-assign]
    for i in (1, 2):
        adapter.log_result(logger, {"x": 1.0, "training_iteration": i, "hostname": "h", "pid": 1, "date": f"d{i}"})
    logger.close()
    assert sent == [{"hostname": "h", "pid": 1, "date": "d1", "framework": "tune"}, {"date": "d2"}]


def test_result_is_copied_and_routed_on_the_pipeline_thread(tmp_path: Path) -> None:
    """`log_result` copies the result (shallowly) and queues the copy: no event
    is emitted on the calling thread (the walk and the stage blocks run on the
    pipeline thread), and keys added or replaced afterwards change nothing."""
    logger = _memory_logger(tmp_path)

    def emit_on_calling_thread(event):
        raise AssertionError(f"emitted on the calling thread: {event}")

    logger.emit = emit_on_calling_thread  # type: ignore[method-assign]
    result = _result(1)
    adapter.log_result(logger, result)
    result["env_runners"] = {"episode_return_mean": -1.0}
    result["late"] = 3.0
    logger.close()
    memory = logger.backends["memory"]
    assert memory.metrics["env_runners/episode_return_mean"] == [10.0] and memory.metrics["collector/reward_mean"] == [10.0]
    assert memory.metrics["learners/default_policy/total_loss"] == [1.0] and memory.metrics["learner/total_loss_avg"] == [1.0]
    assert "late" not in memory.metrics


def test_log_result_rejects_what_is_not_a_result(tmp_path: Path) -> None:
    logger = _memory_logger(tmp_path)
    with pytest.raises(TypeError, match="result dict"):
        adapter.log_result(logger, [1, 2])  # type: ignore[arg-type]
    logger.close()


def test_canonical_vocabulary_lists_rllib() -> None:
    table = vocabulary()

    def natives(canonical: str) -> list[str]:
        entry = table[canonical]["tune"]
        return [entry] if isinstance(entry, str) else list(entry)

    assert natives("collector/reward_mean") == ["env_runners/episode_return_mean"]
    assert natives("evaluator/reward_mean") == ["evaluation/env_runners/episode_return_mean"]
    assert adapter.canonical_name("learners/__all_modules__/total_loss") is None


def test_module_imports_without_ray_and_names_the_extra() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["ray"] = None  # as if Ray were not installed
        import rltrack.adapters.tune as t
        assert callable(t.log_result)
        try:
            t.RLTrackCallback
        except ImportError as exc:
            print(type(exc).__name__, exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "MissingExtraError" in done.stdout and "rltrack[tune]" in done.stdout


def test_callback_is_a_real_logger_callback_and_pickles(tmp_path: Path) -> None:
    from ray.tune.logger import LoggerCallback

    from rltrack.adapters.tune import RLTrackCallback

    callback = RLTrackCallback(run={"root": str(tmp_path)})
    assert isinstance(callback, LoggerCallback)
    assert adapter.RLTrackCallback is RLTrackCallback
    clone = pickle.loads(pickle.dumps(callback))
    assert type(clone) is RLTrackCallback and clone.run_dirs == {}


def test_callback_config_mistakes_fail_when_built(tmp_path: Path) -> None:
    from rltrack.adapters.tune import RLTrackCallback

    with pytest.raises(rltrack.ConfigError, match="names"):
        RLTrackCallback(run={"root": str(tmp_path), "names": "all"})


def _idle_trainable(config):
    """Named by the Trials below; never run."""


def _trial(tmp_path: Path, index: int, config: dict):
    """A real Tune Trial (no Ray session needed until a trial runs)."""
    from ray import tune
    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment import Trial

    tune.register_trainable("rltrack_idle", _idle_trainable)
    storage = StorageContext(storage_path=str(tmp_path / "ray_results"), experiment_dir_name="direct", trial_dir_name=f"t{index}")
    return Trial("rltrack_idle", config=config, trial_id=f"abc_0000{index}", storage=storage, experiment_tag=f"{index}_x={index}")


def test_experiment_end_closes_open_trials_and_new_configs_are_relogged(tmp_path: Path) -> None:
    from ray.tune.experiment import Trial

    from rltrack.adapters.tune import RLTrackCallback

    callback = RLTrackCallback(run={"root": str(tmp_path / "runs")}, backends={"use": []})
    done, interrupted, errored = (_trial(tmp_path, i, {"x": i}) for i in range(3))
    for trial in (done, interrupted):
        callback.log_trial_start(trial)
        callback.log_trial_result(1, trial, {"loss": 1.0, "training_iteration": 1})
    interrupted.set_config({"x": 10})  # as PBT does: a new config object
    callback.log_trial_result(2, interrupted, {"loss": 0.5, "training_iteration": 2})
    callback.log_trial_end(errored, failed=True)  # failed before it ever started
    done.set_status(Trial.TERMINATED)
    callback.on_experiment_end(trials=[done, interrupted, errored])
    assert callback.loggers == {}
    status = {t.trial_id: _meta(callback.run_dirs[t.trial_id])["status"] for t in (done, interrupted, errored)}
    assert status == {done.trial_id: "finished", interrupted.trial_id: "killed", errored.trial_id: "failed"}
    assert _hparams(callback.run_dirs[interrupted.trial_id]) == {"x": 10}
    hparams_events = [e.data for e in rltrack.read_journal(callback.run_dirs[interrupted.trial_id]) if e.kind == "hparams"]
    assert hparams_events == [{"x": 1}, {"x": 10}]
    assert callback.run_dirs[done.trial_id].name == "rltrack_idle_abc_00000_0_x_0"
    assert _meta(callback.run_dirs[done.trial_id])["info"]["trial_path"].endswith("ray_results/direct/t0")


def test_a_trial_end_does_not_hold_tunes_driver_while_a_tracker_is_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tune calls log_trial_end on its driver thread: with MLflow unreachable
    and close_timeout 6 s, four trials ending one after the other used to
    hold the driver 4 x 6 s; now each trial's close runs on a thread of its
    own and on_experiment_end waits for all of them at once (one deadline)."""
    import threading

    from rltrack.adapters.tune import RLTrackCallback

    closed_on, deadlines = [], []
    close, still_behind = rltrack.Logger.close, rltrack.Logger.still_behind
    monkeypatch.setattr(rltrack.Logger, "close", lambda self, *a, **k: closed_on.append(threading.current_thread()) or close(self, *a, **k))
    monkeypatch.setattr(rltrack.Logger, "still_behind", lambda self, deadline: deadlines.append(deadline) or still_behind(self, deadline))
    callback = RLTrackCallback(run={"root": str(tmp_path / "runs"), "close_timeout": 6},
                               backends={"use": ["local", "mlflow"], "mlflow": {"tracking_uri": "http://127.0.0.1:9"}})  # fmt: skip
    trials = [_trial(tmp_path, i, {"x": i}) for i in range(4)]
    for trial in trials:
        callback.log_trial_start(trial)
        for i in range(50):
            callback.log_trial_result(i, trial, {"loss": float(i), "training_iteration": i + 1})
    for trial in trials:
        callback.log_trial_end(trial)
    callback.on_experiment_end(trials=trials)
    assert len(closed_on) == 4 and threading.current_thread() not in closed_on  # not on Tune's driver thread
    assert len(deadlines) == 4 and len(set(deadlines)) == 1  # one close_timeout for every trial at once
    for trial in trials:
        run_dir = callback.run_dirs[trial.trial_id]
        assert _meta(run_dir)["status"] == "finished"
        assert [e.data["loss"] for e in rltrack.read_journal(run_dir) if "loss" in e.data] == [float(i) for i in range(50)]
        assert "mlflow.pending" in json.loads((run_dir / "report.json").read_text())["counts"]


# ---- with a real Ray session ------------------------------------------------------


def test_tune_run_grid_one_run_dir_per_trial_late_keys_hparams_failure(tmp_path: Path, ray_cluster) -> None:
    from ray import tune
    from ray_versions import report

    from rltrack.adapters.tune import RLTrackCallback

    def trainable(config):
        for i in range(1, 5):
            metrics = {"loss": config["lr"] * i, "nested": {"acc": 0.1 * i}, "phase": f"it{i}"}
            if i >= 3:
                metrics["eval_score"] = 10.0 * i  # first appears at iteration 3
            report(metrics)
        if config["lr"] > 0.05:
            raise RuntimeError("this trial is made to fail")

    callback = RLTrackCallback(run={"root": str(tmp_path / "runs")})
    tune.run(
        trainable,
        config={"lr": tune.grid_search([0.01, 0.1]), "arch": "mlp"},
        callbacks=[callback],
        storage_path=str(tmp_path / "ray_results"),
        name="grid",
        verbose=0,
        raise_on_failed_trial=False,
    )
    assert callback.loggers == {}  # every run closed
    run_dirs = sorted((tmp_path / "runs" / "grid").iterdir())
    assert len(run_dirs) == 2 and sorted(callback.run_dirs.values()) == run_dirs
    statuses = {}
    for run_dir in run_dirs:
        meta = _meta(run_dir)
        info = meta["info"]
        hparams = _hparams(run_dir)
        assert set(hparams) == {"lr", "arch"} and hparams["arch"] == "mlp"
        statuses[hparams["lr"]] = meta["status"]
        assert info["framework"] == "tune" and info["experiment"] == "grid"
        assert run_dir == callback.run_dirs[info["trial_id"]]
        assert run_dir.name.startswith(info["trial_name"])
        for key in ("hostname", "pid", "node_ip", "date", "timestamp", "iterations_since_restore", "experiment_tag"):
            assert key in info, key
        df = pd.read_csv(run_dir / "progress.csv")
        assert list(df["train_iter"]) == [1, 2, 3, 4]
        assert df["loss"].tolist() == pytest.approx([hparams["lr"] * i for i in (1, 2, 3, 4)])
        assert df["nested/acc"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4])
        assert df["eval_score"].isna().tolist() == [True, True, False, False]
        assert df["eval_score"].iloc[2:].tolist() == [30.0, 40.0]
        assert {"time_this_iter_s", "time_total_s"} <= set(df.columns)
        assert not set(RUN_INFO_COLUMNS) & set(df.columns)
        events = list(rltrack.read_journal(run_dir))
        assert {"loss", "nested/acc", "eval_score", "phase", "time_this_iter_s"} <= _tags(events)
        assert [e.data["phase"] for e in events if e.kind == "text"] == ["it1", "it2", "it3", "it4"]
        assert {e.kind for e in events if "time_this_iter_s" in e.data} == {"timing"}
        assert {e.source for e in events if e.kind in ("scalars", "text")} == {"tune"}
        assert not set(RUN_INFO_COLUMNS) & _tags(e for e in events if e.kind in ("scalars", "timing"))
    assert statuses == {0.01: "finished", 0.1: "failed"}


@pytest.mark.slow
def test_tuner_run_config_callback_and_run_name_as_group(tmp_path: Path, ray_cluster) -> None:
    from ray import tune
    from ray_versions import RunConfig, report

    from rltrack.adapters.tune import RLTrackCallback

    def trainable(config):
        for i in range(1, 3):
            report({"env_runners": {"episode_return_mean": config["x"] * i, "num_env_steps_sampled_lifetime": 100 * i}})

    callback = RLTrackCallback(run={"root": str(tmp_path / "runs"), "name": "my_group", "names": "canonical"},
                               backends={"use": ["local"]})
    tuner = tune.Tuner(
        trainable,
        param_space={"x": 3.0},
        run_config=RunConfig(name="tuner_exp", storage_path=str(tmp_path / "ray_results"), callbacks=[callback], verbose=0),
    )
    results = tuner.fit()
    assert not results.errors
    (run_dir,) = (tmp_path / "runs" / "my_group").iterdir()
    assert _meta(run_dir)["status"] == "finished" and _meta(run_dir)["info"]["experiment"] == "tuner_exp"
    assert _hparams(run_dir) == {"x": 3.0}
    df = pd.read_csv(run_dir / "progress.csv")
    assert df["collector/reward_mean"].tolist() == [3.0, 6.0]
    assert df["env_steps"].tolist() == [100, 200] and "env_runners/episode_return_mean" not in df.columns
    assert {e.source for e in rltrack.read_journal(run_dir) if e.kind == "scalars"} == {"rllib"}


def test_rllib_ppo_cartpole_train_through_log_result(tmp_path: Path, ray_cluster) -> None:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray_versions import skip_without_rllib_callback_functions

    skip_without_rllib_callback_functions()

    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(train_batch_size_per_learner=256, minibatch_size=64, num_epochs=1)
        .evaluation(evaluation_interval=2, evaluation_duration=2, evaluation_duration_unit="episodes")
        .debugging(seed=0)
    )
    algo = config.build_algo()
    logger = rltrack.make_logger(run={"root": str(tmp_path), "name": "ppo"}, backends={"use": ["memory", "local"]})
    sampled, episodes = [], []
    try:
        for _ in range(2):
            result = algo.train()
            sampled.append(int(result["env_runners"]["num_env_steps_sampled_lifetime"]))
            episodes.append(int(result["env_runners"]["num_episodes"]))
            adapter.log_result(logger, result)
    finally:
        algo.stop()
        logger.close()
    memory = logger.backends["memory"]
    assert len(memory.metrics["collector/reward_mean"]) == 2
    # without record_episodes: RLlib's windowed statistics, marked preaggregated; no std, no each_reward
    assert memory.metrics["collector/episode_count"] == episodes
    assert "collector/reward_std" not in memory.metrics and "collector/each_reward" not in memory.metrics
    assert memory.steps["collector/reward_mean"] == sampled
    learner = {tag for tag in memory.metrics if tag.startswith("learner/")}
    assert {"learner/total_loss_avg", "learner/policy_loss_avg", "learner/value_loss_avg"} <= learner
    assert memory.steps["evaluator/reward_mean"] == sampled[1:]  # evaluation ran at iteration 2 only
    numeric = [e for e in memory.events if e.kind in ("scalars", "timing")]
    assert all(e.source == "rllib" for e in numeric)
    assert all(e.preaggregated for e in numeric if "time_this_iter_s" not in e.data)
    assert [e.preaggregated for e in numeric if "time_this_iter_s" in e.data] == [False, False]
    assert all(e.steps == {"env_steps": s, "train_iter": i + 1} for e in numeric
               for i, s in enumerate(sampled) if e.steps["train_iter"] == i + 1)
    assert any(e.kind == "timing" and "training_iteration" in e.data for e in numeric)
    assert _hparams(logger.run_dir)["lr"] == pytest.approx(5e-5)
    info = _meta(logger.run_dir)["info"]
    assert info["framework"] == "rllib" and "hostname" in info
    df = pd.read_csv(logger.run_dir / "progress.csv")
    assert df["env_steps"].tolist() == sampled and "evaluator/reward_mean" in df.columns


@pytest.mark.slow
def test_a_sweep_of_concurrent_trials_reaches_every_tracker_through_one_agent(tmp_path: Path, ray_cluster) -> None:
    """Four trials at once (half a CPU each of the session cluster's two),
    local + MLflow (default SQLite store) + W&B offline: the Tune driver is
    never held by a tracker, one agent serves every trial, and every value
    arrives once everywhere. (Eight trials took 108 s on a loaded machine;
    what is checked does not depend on how many run at once beyond one.)"""
    import psutil
    import wandb_reader
    from mlflow import MlflowClient
    from ray import tune
    from ray_versions import RunConfig, report

    from rltrack.adapters.tune import RLTrackCallback
    from rltrack.agent.files import agent_dir, registrations

    def trainable(config):
        for i in range(40):
            report({f"m{k}": config["x"] * 1000 + i + k / 10 for k in range(5)})

    root = tmp_path / "runs"
    callback = RLTrackCallback(run={"root": str(root)}, backends={"use": ["local", "mlflow", "wandb"], "wandb": {"project": "sweep"}})
    most_at_once = 0
    watcher_done = False

    def watch() -> None:  # this session's agents (other agent directories may have theirs)
        nonlocal most_at_once
        while not watcher_done:
            named = {p.pid: p.info["ppid"] for p in psutil.process_iter(["cmdline", "status", "ppid"])
                     if (p.info["cmdline"] or [])[-3:] == ["-m", "rltrack.agent.process", str(agent_dir())] and p.info["status"] != psutil.STATUS_ZOMBIE}  # fmt: skip
            agents = [pid for pid, parent in named.items() if parent not in named]  # a child not yet exec'd (wandb-core) bears its parent's command line
            most_at_once = max(most_at_once, len(agents))
            time.sleep(0.1)

    import threading

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 0.5}),
        param_space={"x": tune.grid_search(list(range(4)))},
        run_config=RunConfig(name="sweep", storage_path=str(tmp_path / "ray_results"), callbacks=[callback], verbose=0),
    )
    assert not tuner.fit().errors
    wait_until(lambda: not registrations(agent_dir(), under=root), 300, "the agent to finish what close() left to it", every=0.2)
    watcher_done = True
    thread.join()
    assert most_at_once == 1  # (an agent left idle by an earlier test may end meanwhile and another take over)
    client = MlflowClient(f"sqlite:///{root.resolve() / 'mlflow.db'}")  # the root's store, shared by every experiment
    run_dirs = sorted(path for path in (root / "sweep").iterdir() if path.is_dir())
    assert len(run_dirs) == 4
    for run_dir in run_dirs:
        x = _hparams(run_dir)["x"]
        expected = [x * 1000 + i for i in range(40)]
        assert pd.read_csv(run_dir / "progress.csv")["m0"].tolist() == expected
        run_id = tracker_state(run_dir, "mlflow")["run_id"]
        assert [m.value for m in client.get_metric_history(run_id, "m0")] == expected  # each value once
        assert client.get_run(run_id).info.status == "FINISHED"
        (wandb_file,) = wandb_reader.run_files(run_dir)
        assert [row["m0"] for row in wandb_reader.history(wandb_file) if "m0" in row] == expected


RAY_CLUSTER_SWEEP = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import ray
    from ray import tune
    from rltrack.adapters.tune import RLTrackCallback
    sys.path.insert(0, sys.argv[2])  # tests/helpers
    from ray_versions import RunConfig, report
    from waiting import wait_until
    from rltrack.agent.files import agent_dir, registrations

    root = Path(sys.argv[1])
    inner_db = f"sqlite:///{root / 'inner.db'}"

    def trainable(config):
        import rltrack  # the trial's own logger, on whichever node runs the trial
        settings = {"run": {"root": str(root / "inner"), "name": f"trial_{config['x']}", "close_timeout": 60},
                    "backends": {"use": ["local", "mlflow"], "mlflow": {"tracking_uri": inner_db}}}
        with rltrack.make_logger(settings) as logger:
            for i in range(20):
                logger.write({"v": config["x"] * 100 + i}, step=i)
                report({"v": config["x"] * 100 + i})

    from ray_start import two_node_cluster

    cluster = two_node_cluster()
    ray.init(address=cluster.address, log_to_driver=False)
    callback = RLTrackCallback(run={"root": str(root / "driver"), "close_timeout": 60}, backends={"use": ["local", "mlflow"]})
    tuner = tune.Tuner(tune.with_resources(trainable, {"cpu": 0.5}), param_space={"x": tune.grid_search([1, 2, 3, 4])},
                       run_config=RunConfig(name="cluster", storage_path=str(root / "ray_results"), callbacks=[callback], verbose=0))
    assert not tuner.fit().errors
    wait_until(lambda: not registrations(agent_dir(), under=root), 120, "the agent to finish every run", every=0.2)
    ray.shutdown()
    cluster.shutdown()
    print(json.dumps({"registrations": len(registrations(agent_dir(), under=root))}))
    """
)


@pytest.mark.slow
def test_a_two_node_ray_cluster_delivers_the_driver_callback_and_the_trials_own_loggers(tmp_path: Path) -> None:
    """`ray.cluster_utils.Cluster` with a head and a worker node on this
    machine: the callback's runs are written on the driver, the trials' own
    loggers write where the trials run; one agent (per machine) delivers both."""
    from mlflow import MlflowClient

    done = subprocess.run([sys.executable, "-c", RAY_CLUSTER_SWEEP, str(tmp_path), str(Path(__file__).parents[1] / "helpers")], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "RAY_USAGE_STATS_ENABLED": "0"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1])["registrations"] == 0  # the agent finished every run
    driver_runs = sorted(path for path in (tmp_path / "driver" / "cluster").iterdir() if path.is_dir())
    inner_runs = sorted((tmp_path / "inner").iterdir())
    assert len(driver_runs) == len(inner_runs) == 4
    driver = MlflowClient(f"sqlite:///{tmp_path / 'driver' / 'mlflow.db'}")
    inner = MlflowClient(f"sqlite:///{tmp_path / 'inner.db'}")
    for client, run_dirs in ((driver, driver_runs), (inner, inner_runs)):
        values = []
        for run_dir in run_dirs:
            run_id = tracker_state(run_dir, "mlflow")["run_id"]
            history = [m.value for m in client.get_metric_history(run_id, "v")]
            assert history == sorted(history) and len(history) == 20  # each value once
            values.append(history[0])
        assert sorted(values) == [100.0, 200.0, 300.0, 400.0]


def _sweep(tmp_path: Path, trials: int, close_timeout: float, backends: dict[str, Any]):
    from rltrack.adapters.tune import RLTrackCallback

    callback = RLTrackCallback(run={"root": str(tmp_path / "runs"), "close_timeout": close_timeout}, backends=backends)
    started = [_trial(tmp_path, i, {"x": i}) for i in range(trials)]
    for trial in started:
        callback.log_trial_start(trial)
        for i in range(20):
            callback.log_trial_result(i, trial, {"loss": float(i), "training_iteration": i + 1})
    return callback, started


def test_a_sweep_says_once_what_its_trials_left_behind(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """MLflow unreachable: one line for the sweep at its end, not one per trial (issue 27)."""
    callback, trials = _sweep(tmp_path, 4, 1, {"use": ["local", "mlflow"], "mlflow": {"tracking_uri": "http://127.0.0.1:9"}})
    for trial in trials:
        callback.log_trial_end(trial)
    callback.on_experiment_end(trials=trials)
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("rltrack:") and ("not done" in line or "not delivered" in line)]
    assert len(lines) == 1, lines
    parent = callback.run_dirs[trials[0].trial_id].parent
    assert "4 of 4 trials' runs not delivered" in lines[0] and f"for run in {parent}/*/; do rltrack sync \"$run\" --to mlflow" in lines[0]  # and --to storage where Tune's storage_path is one
    for trial in trials:  # the agent writes report.json on its own (at most once a second): read once it is there
        report = callback.run_dirs[trial.trial_id] / "report.json"
        wait_until(report.exists, 300, f"the agent to write {report}")
        assert "mlflow.pending" in json.loads(report.read_text())["counts"]


def test_a_sweep_whose_agent_delivers_within_the_bound_says_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The stand-in tracker hangs while the trials end (each trial said "not
    done at close" before), then answers: the experiment's end waits for the
    agent and nothing is said."""
    from stand_in_tracker import received

    hang = tmp_path / "hang"
    hang.touch()
    name = "stand_in_tracker:FileTracker"
    callback, trials = _sweep(tmp_path, 3, 5, {"use": [name], name: {"hang_while": str(hang)}})
    for trial in trials:
        callback.log_trial_end(trial)
    for closing in callback._closing:  # every trial's close has returned while the tracker hangs
        closing.join(120)
        assert not closing.is_alive()
    hang.unlink()
    callback.on_experiment_end(trials=trials)
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("rltrack:")]
    assert said == []
    for trial in trials:
        assert [e.data["loss"] for e in received(callback.run_dirs[trial.trial_id]) if "loss" in e.data] == [float(i) for i in range(20)]
