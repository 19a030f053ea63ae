"""Calling-thread cost of the Ray Tune / RLlib adapter per result, beside Tune's own logger callbacks.

Per result dict shaped like RLlib 2.60's `algo.train()` output as Tune hands it
to callbacks (nested dicts, numpy float64 values, Tune's bookkeeping keys and
the trial's `config`), in two sizes: "40 keys" (39 metric leaves, a typical
PPO result with the connector timers left out) and "150 keys" (the same plus
the ~100 per-connector timers RLlib 2.60 really reports):

  * bare capture          - `list.append(dict(result))`: the floor;
  * RLTrackCallback       - `rltrack.adapters.tune.RLTrackCallback.log_trial_result`
                            on a real `ray.tune.experiment.Trial`, default
                            config (local backend: journal, tfevents, csv, text
                            logs, all written on rltrack's pipeline thread);
  * log_result            - `rltrack.adapters.tune.log_result(logger, result)`,
                            the no-Tune path, same backend;
  * Tune CSV / JSON / TBX - `ray.tune.logger.CSVLoggerCallback`,
                            `JsonLoggerCallback`, `TBXLoggerCallback`
                            `.log_trial_result` on their own real Trial (they
                            write and flush on the calling thread, which is
                            Tune's driver loop);
  * Tune's 3 defaults     - the three above called one after the other: what
                            every `tune.run` pays per result unless
                            TUNE_DISABLE_AUTO_CALLBACK_LOGGERS is set.

The Trials are real Trial objects with a real StorageContext; Ray is
initialised (num_cpus=1, no dashboard) only because a Trial's local path lives
in the Ray session directory. When Ray cannot start (on a loaded machine its
raylet gives up after ~15 s, ray-project/ray#65983) or with --no-ray, the
StorageContext's one session-dependent method is overridden to stage trial
files under a temporary directory instead; the header line says which ran. Systems alternate in rounds; between blocks each
is settled untimed (rltrack `flush()`), as in the other bench scripts. The
last line measures how fast rltrack's pipeline thread drains a burst.

    python bench/bench_tune.py            # about a minute, most of it ray.init
    python bench/bench_tune.py --quick
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import rltrack  # noqa: E402
from rltrack.adapters.tune import log_result  # noqa: E402
from report import Section, arguments  # noqa: E402  (bench/ is sys.path[0])
from timing import System, ratio_table, run_rounds  # noqa: E402


def results(n: int, size: str, seed: int = 0) -> list[dict[str, Any]]:
    """n RLlib-like results as Tune passes them to callbacks."""
    rng = np.random.default_rng(seed)
    f = np.float64
    config = {"lr": 5e-5, "gamma": 0.99, "lambda_": 0.95, "clip_param": 0.3, "vf_clip_param": 10.0, "entropy_coeff": 0.0,
              "kl_coeff": 0.2, "kl_target": 0.01, "num_epochs": 30, "minibatch_size": 128, "train_batch_size_per_learner": 4000,
              "env": "CartPole-v1", "num_env_runners": 2, "framework": "torch", "seed": 0, "model": {"fcnet_hiddens": [256, 256]},
              "use_kl_loss": True, "use_critic": True, "use_gae": True, "grad_clip": None}  # fmt: skip
    out = []
    for i in range(1, n + 1):
        ret = f(rng.normal(100, 10))
        env_runners: dict[str, Any] = {
            "episode_return_mean": ret, "episode_return_max": ret + 20, "episode_return_min": ret - 20,
            "episode_len_mean": ret, "episode_len_max": np.int64(200), "episode_len_min": np.int64(10),
            "num_env_steps_sampled": 4000, "num_env_steps_sampled_lifetime": float(4000 * i),
            "num_episodes": 40, "num_episodes_lifetime": float(40 * i), "env_step_timer": f(rng.random() * 1e-4),
            "sample": f(rng.random()), "module_episode_return_mean": {"default_policy": ret},
            "agent_episode_return_mean": {"default_agent": ret},
            "num_env_steps_sampled_lifetime_throughput": {"throughput_since_last_reduce": f(rng.uniform(500, 600))},
        }  # fmt: skip
        learner = {k: f(rng.random()) for k in ("total_loss", "policy_loss", "vf_loss", "vf_loss_unclipped", "entropy",
                                                 "mean_kl_loss", "curr_kl_coeff", "curr_entropy_coeff", "vf_explained_var",
                                                 "default_optimizer_learning_rate")}  # fmt: skip
        learner["num_module_steps_trained"] = np.int64(4000)
        if size == "150":
            connectors = {f"connector_{j}": f(rng.random() * 1e-5) for j in range(25)}
            env_runners["env_to_module_connector"] = {"timers": {"connectors": dict(connectors)}}
            env_runners["module_to_env_connector"] = {"timers": {"connectors": dict(connectors)}}
            learner["learner_connector"] = {"timers": {"connectors": dict(connectors)}}
            env_runners["rlmodule_inference_timer"] = f(rng.random() * 1e-4)
            env_runners["extra"] = {f"stat_{j}": f(rng.random()) for j in range(24)}
        result = {
            "env_runners": env_runners,
            "learners": {"default_policy": learner,
                         "__all_modules__": {"num_env_steps_trained": np.int64(4000), "num_env_steps_trained_lifetime": float(4000 * i)}},
            "timers": {k: f(rng.random()) for k in ("training_iteration", "training_step", "env_runner_sampling_timer",
                                                    "learner_update_timer", "synch_weights")},
            "perf": {"cpu_util_percent": f(50.0), "ram_util_percent": f(6.2)},
            "fault_tolerance": {"num_healthy_workers": 2, "num_remote_worker_restarts": 0},
            "num_env_steps_sampled_lifetime": float(4000 * i),
            "num_training_step_calls_per_iteration": 1,
            "training_iteration": i, "time_this_iter_s": 1.5, "time_total_s": 1.5 * i, "time_since_restore": 1.5 * i,
            "timestamp": 1_790_000_000 + i, "date": "2026-11-20_12-00-00", "done": False, "trial_id": "abc12_00000",
            "hostname": "vm", "pid": 1234, "node_ip": "127.0.0.1", "iterations_since_restore": i, "checkpoint_dir_name": None,
            "config": config,
        }  # fmt: skip
        out.append(result)
    return out


def count_leaves(result: dict[str, Any]) -> int:
    """Metric leaves: what is neither the config nor Tune's bookkeeping."""
    from rltrack.adapters.tune import ITERATION_KEY, RUN_INFO_KEYS

    n = 0
    for key, value in result.items():
        if key == "config" or key in RUN_INFO_KEYS or key == ITERATION_KEY:
            continue
        n += count_leaves(value) if isinstance(value, dict) else 1
    return n


BOOKKEEPING = 9  # timestamp, date, done, trial_id, hostname, pid, node_ip, iterations_since_restore, checkpoint_dir_name


def bench_trainable(config: dict[str, Any]) -> None:
    """The trainable the Trials name; never run (registered so a Trial can be built)."""


#: Set when Ray could not start (or --no-ray): the driver staging directory then
#: lives under this path instead of the Ray session directory (see make_trial).
STAGING_ROOT: Path | None = None


def make_trial(storage_root: Path, name: str) -> Any:
    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment import Trial

    cls = StorageContext
    if STAGING_ROOT is not None:
        staging = STAGING_ROOT

        class LocalStaging(StorageContext):  # the one substitution: no Ray session directory needed
            def _get_session_path(self) -> str:
                return (staging / self.experiment_dir_name).as_posix()

        cls = LocalStaging
    storage = cls(storage_path=str(storage_root), experiment_dir_name="bench", trial_dir_name=name)
    from ray import tune

    tune.register_trainable("bench_trainable", bench_trainable)
    trial = Trial("bench_trainable", config=results(1, "40")[0]["config"], trial_id=f"{name}_00000", storage=storage, experiment_tag="0")
    trial.init_local_path()
    return trial


def systems(tmp: Path) -> dict[str, System]:
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback

    from rltrack.adapters.tune import RLTrackCallback

    captured: list[dict[str, Any]] = []
    nothing = lambda: None  # noqa: E731
    out: dict[str, System] = {"bare capture (floor)": (lambda r: captured.append(dict(r)), captured.clear, captured.clear)}

    callback = RLTrackCallback(run={"root": str(tmp / "rltrack")})
    cb_trial = make_trial(tmp / "ray", "rltrack_cb")
    callback.log_trial_start(cb_trial)
    out["RLTrackCallback.log_trial_result (local backend)"] = (
        lambda r: callback.log_trial_result(0, cb_trial, r),
        lambda: callback.loggers[cb_trial.trial_id].flush(),
        lambda: (callback.log_trial_end(cb_trial), callback.on_experiment_end([])),  # the trial's close runs on a thread: waited for here
    )
    logger = rltrack.make_logger(run={"root": str(tmp / "rltrack"), "name": "log_result"})
    out["log_result(logger, result) (local backend)"] = (lambda r: log_result(logger, r), logger.flush, logger.close)

    tune_callbacks = {}
    for label, cls in (("CSV", CSVLoggerCallback), ("JSON", JsonLoggerCallback), ("TBX", TBXLoggerCallback)):
        cb, trial = cls(), make_trial(tmp / "ray", f"tune_{label.lower()}")
        cb.log_trial_start(trial)
        tune_callbacks[label] = (cb, trial)
        out[f"Tune {cls.__name__}.log_trial_result"] = (
            lambda r, cb=cb, trial=trial: cb.log_trial_result(0, trial, r), nothing, lambda cb=cb, trial=trial: cb.log_trial_end(trial))
    defaults = [(cls(), make_trial(tmp / "ray", f"tune_all_{cls.__name__}")) for cls in (CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback)]
    for cb, trial in defaults:
        cb.log_trial_start(trial)

    def all_three(r: dict[str, Any]) -> None:
        for cb, trial in defaults:
            cb.log_trial_result(0, trial, r)

    out["Tune's 3 default logger callbacks (CSV+JSON+TBX)"] = (all_three, nothing, lambda: [cb.log_trial_end(t) for cb, t in defaults])
    return out


def drain(tmp: Path, items: list[dict[str, Any]]) -> tuple[float, float]:
    """(calling-thread µs per result, wall µs per result until flush() returns) for a burst."""
    logger = rltrack.make_logger(run={"root": str(tmp / "rltrack"), "name": "burst"})
    t0 = time.perf_counter()
    for r in items:
        log_result(logger, r)
    t1 = time.perf_counter()
    logger.flush()
    t2 = time.perf_counter()
    logger.close()
    return (t1 - t0) / len(items) * 1e6, (t2 - t0) / len(items) * 1e6


def init_ray(tmp: Path) -> str:
    """Starts Ray for the Trials' session directory; if it cannot start, stages
    trial files under `tmp` instead. Returns which of the two happened."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        return "Trials staged in the Ray session directory (ray.init)"
    except Exception as exc:  # Ray gives its raylet ~15 s to see its agents start (ray-project/ray#65983)
        ray.shutdown()
        return stage_locally(tmp, f"ray.init failed ({str(exc)[:60]}...)")


def stage_locally(tmp: Path, why: str) -> str:
    global STAGING_ROOT
    STAGING_ROOT = tmp / "staging"
    return f"{why}: Trials staged under a temporary directory"


def main() -> None:
    parser = arguments(__doc__, "400 results")
    parser.add_argument("--results", type=int, default=2_000, help="timed results per system and size")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-ray", action="store_true", help="do not start Ray: stage trial files under a temporary directory")
    args = parser.parse_args()
    if args.quick:
        args.results = 400
    section = Section()
    started = time.time()
    import ray

    tables = {}
    with tempfile.TemporaryDirectory(prefix="rltrack-bench-tune-") as tmp_name:
        tmp = Path(tmp_name)
        how = stage_locally(tmp, "--no-ray") if args.no_ray else init_ray(tmp)
        ray_started = time.time()
        warmup = 200
        for size in ("40", "150"):
            items = results(args.results + warmup, size)
            leaves = count_leaves(items[0])
            tables[size] = (leaves, run_rounds(systems(tmp / size), items, args.rounds, warmup))
        burst = drain(tmp, results(2_000, "150", seed=1))
    ray.shutdown()
    ref = "Tune CSVLoggerCallback.log_trial_result"
    out = [f"{ray_started - started:.0f} s of the run went to starting Ray; {how}.", ""]
    for size, (leaves, res) in tables.items():
        ours = res["RLTrackCallback.log_trial_result (local backend)"]["median"]
        three = res["Tune's 3 default logger callbacks (CSV+JSON+TBX)"]["median"]
        out += [f"### {leaves} metric and timing leaves + training_iteration + {BOOKKEEPING} Tune bookkeeping keys + config (20 keys); "
                f"{args.results:,} timed results per system, {args.rounds} alternating rounds", "", ratio_table(res, ref, unit="Tune CSV"), "",
                f"- RLTrackCallback median {ours:.1f} µs vs Tune's CSV {res[ref]['median']:.1f} µs and its three default "
                f"callbacks together {three:.1f} µs ({three / ours:.1f}× ours).", ""]  # fmt: skip
    out.append(f"Burst of 2,000 150-key results through log_result: {burst[0]:.1f} µs per result on the calling thread, "
               f"{burst[1]:.1f} µs per result until flush() returned (journal + local backend written).")  # fmt: skip
    section.finish("bench_tune: Ray Tune / RLlib adapter, calling-thread cost per result", "\n".join(out), write=not args.no_write)


if __name__ == "__main__":
    main()
