"""Ray Tune with rltrack: a 2-point grid search, each trial its own rltrack run.

    python examples/tune_grid.py                 # a small function trainable, grid over lr
    python examples/tune_grid.py --rllib         # RLlib PPO on CartPole-v1, grid over lr (a minute or more)
    python examples/tune_grid.py --root /tmp/runs --backends local,console

Runs land in <root>/<experiment>/<trial name>_<tag>/ (meta.json, total_config.py,
progress.csv, journal.jsonl, log/...). Tune's own results stay where Tune puts
them (--storage, default ~/ray_results). The function trainable reports a
string (to text), a list (to a histogram) and an evaluation score that first
appears at iteration 3 (kept: a new progress.csv column); the RLlib variant
records each episode (`record_episodes`), so every iteration's collector block
in log/collector/collector_logger.txt (reward_mean/std/max/min, each_reward,
counts) is computed from that iteration's episodes; evaluator and learner
blocks follow RLlib's evaluation and learner results.
"""

from __future__ import annotations

import argparse
import math
import os
import random
from pathlib import Path

from ray import tune

from rltrack.adapters.tune import RLTrackCallback, record_episodes


def trainable(config: dict) -> None:
    """A stand-in for training: a loss that falls at a rate set by lr."""
    rng = random.Random(config["seed"])
    for i in range(1, 6):
        loss = math.exp(-config["lr"] * 20 * i) + 0.01 * rng.random()
        metrics = {
            "loss": loss,
            "collector": {"reward_mean": 100 * (1 - loss)},
            "phase": "warmup" if i < 3 else "train",  # a string: goes to text
            "grad_norms": [rng.random() for _ in range(8)],  # a list: goes to a histogram
            "timesteps_this_iter": 1000,  # Tune then fills timesteps_total: the env_steps axis
        }
        if i >= 3:
            metrics["eval_score"] = 100 * (1 - loss) - 5  # first appears at iteration 3
        tune.report(metrics)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rllib", action="store_true", help="RLlib PPO on CartPole-v1 instead of the function trainable")
    parser.add_argument("--root", default="runs", help="rltrack run root (default: runs)")
    parser.add_argument("--backends", default="local", help="comma-separated rltrack backends (default: local)")
    parser.add_argument("--storage", default=None, help="Tune's storage_path (default: ~/ray_results)")
    parser.add_argument("--iterations", type=int, default=3, help="PPO training iterations per trial (--rllib)")
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    callback = RLTrackCallback(run={"root": args.root}, backends={"use": [b for b in args.backends.split(",") if b]})
    storage = str(Path(args.storage).resolve()) if args.storage else None
    if args.rllib:
        from ray.rllib.algorithms.ppo import PPOConfig

        config = (
            PPOConfig()
            .environment("CartPole-v1")
            .env_runners(num_env_runners=0)
            .callbacks(on_episode_end=record_episodes)  # individual episodes for the stage blocks
            .training(lr=tune.grid_search([1e-4, 1e-3]), train_batch_size_per_learner=500, minibatch_size=100, num_epochs=2)
            .evaluation(evaluation_interval=2, evaluation_duration=3, evaluation_duration_unit="episodes")
        )
        tuner = tune.Tuner(
            "PPO",
            param_space=config,
            run_config=tune.RunConfig(
                name="ppo_cartpole_grid",
                storage_path=storage,
                stop={"training_iteration": args.iterations},
                callbacks=[callback],
                verbose=0,
            ),
            tune_config=tune.TuneConfig(max_concurrent_trials=1),
        )
    else:
        tuner = tune.Tuner(
            trainable,
            param_space={"lr": tune.grid_search([0.01, 0.1]), "seed": 0},
            run_config=tune.RunConfig(name="toy_grid", storage_path=storage, callbacks=[callback], verbose=0),
        )
    grid = tuner.fit()
    ray.shutdown()
    print(f"Tune results: {grid.experiment_path}")
    for trial_id, run_dir in sorted(callback.run_dirs.items()):
        print(f"rltrack run of trial {trial_id}: {run_dir}")
    print("Read one with: python -c \"import pandas as pd; print(pd.read_csv('<run dir>/progress.csv'))\"")


if __name__ == "__main__":
    main()
