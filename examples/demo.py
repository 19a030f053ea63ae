"""The demo behind `make demo`: a training-like loop logging through rltrack's plain API.

It needs no RL framework: a fake agent whose returns rise and losses fall,
logged the way DI-engine's serial pipeline does (collector, learner,
evaluator), through all four filters, into the local run directory.
"""

from __future__ import annotations

import argparse
import math
import random
import time

import rltrack

CONFIG = {
    "run": {"root": "runs", "name": "demo", "tracked": ["env_id", "lr"]},
    "filters": [
        {"type": "none"},
        {"type": "smoothing", "regex": "reward", "coeff": 0.9},
        {"type": "aggregate", "regex": "loss", "stats": ["mean", "std", "median", "min", "max"]},
        {"type": "time", "seconds": 0.005},
    ],
    "backends": {"use": ["local", "console"]},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--root", default="runs")
    args = parser.parse_args()
    rng = random.Random(0)
    config = {**CONFIG, "run": {**CONFIG["run"], "root": args.root}}
    with rltrack.make_logger(config) as logger:
        logger.log_hparams({"env_id": "CartPole-v1", "lr": 3e-4, "policy": {"hidden": [64, 64]}})
        env_steps = 0
        for it in range(1, args.iterations + 1):
            with logger.timer("collect"):
                returns = [min(500.0, 20 + 12 * it + rng.gauss(0, 10)) for _ in range(8)]
                env_steps += 2048
            logger.write(
                {"reward_mean": sum(returns) / len(returns), "reward_max": max(returns), "episode_count": len(returns)},
                step={"env_steps": env_steps, "train_iter": it},
                namespace="collector",
            )
            for _ in range(10):  # ten gradient steps, aggregated at dump
                loss = math.exp(-it / 8) + rng.random() * 0.05
                logger.write({"total_loss": loss, "cur_lr": 3e-4}, namespace="learner")
            if it % 5 == 0:
                logger.write({"reward_mean": sum(returns) / len(returns) + rng.gauss(0, 5)}, namespace="evaluator")
                logger.log_checkpoint({"iteration": it, "weights": [rng.random() for _ in range(4)]}, iteration=it, metric=sum(returns))
            logger.dump(step={"env_steps": env_steps, "train_iter": it})
            time.sleep(0.01)
    print(f"\nrun directory: {logger.run_dir}")
    print(f"look at it with: tensorboard --logdir {logger.run_dir / 'log' / 'serial'}")


if __name__ == "__main__":
    main()
