"""Stable-Baselines3 PPO on CartPole-v1 with rltrack attached.

    python examples/sb3_ppo_cartpole.py [--timesteps 5000] [--root runs] [--name sb3_ppo_cartpole]

SB3 logs as usual; `attach` adds rltrack next to SB3's own outputs, an
`EvalCallback` evaluates every 1,000 steps, and two `RLTrackCallback`s record
the hyperparameters, a checkpoint every 2,000 steps and the best model by
evaluation. rltrack writes the run directory (local backend) and prints a
table per namespace at each SB3 dump (console backend). Needs the `sb3` extra:
pip install 'rltrack[sb3]'.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import rltrack
from rltrack.adapters.sb3 import RLTrackCallback, attach


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=5_000, help="environment steps to train for (default 5000)")
    parser.add_argument("--root", default="runs", help="directory holding run directories (default ./runs)")
    parser.add_argument("--name", default="sb3_ppo_cartpole", help="run name (a timestamp is added if it is taken)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--backends",
        default="local,console,mlflow,wandb,trackio",
        help="comma-separated rltrack backends (default: local run dir, console, MLflow on <root>/mlflow.db, W&B offline, trackio in <root>/trackio)",
    )
    args = parser.parse_args(argv)

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import EvalCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)  # a small MLP: threads cost more than they bring
    logger = rltrack.make_logger(
        run={"root": args.root, "name": args.name, "tracked": ["algo", "env_id", "learning_rate", "n_steps", "seed"]},
        backends={"use": [b.strip() for b in args.backends.split(",") if b.strip()]},
    )
    n_envs = 4
    model = PPO(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=n_envs, seed=args.seed),
        n_steps=128,  # x 4 envs: one SB3 dump every 512 steps
        batch_size=128,
        n_epochs=4,
        learning_rate=1e-3,
        seed=args.seed,
        device="cpu",
        verbose=0,  # rltrack's console backend prints the tables
    )
    attach(model, logger)  # keeps whatever SB3 outputs the model has, adds rltrack's
    eval_callback = EvalCallback(
        make_vec_env("CartPole-v1", n_envs=1, seed=args.seed + 100),
        eval_freq=max(1_000 // n_envs, 1),  # SB3 counts calls; each call steps all envs
        n_eval_episodes=5,
        callback_on_new_best=RLTrackCallback(logger),  # -> ckpt/ckpt_best.pth.tar (torch.load) and ckpt_best.zip (PPO.load)
        verbose=0,
    )
    periodic = RLTrackCallback(logger, save_freq=max(2_000 // n_envs, 1))  # hyperparameters, ckpt/iteration_<N>.pth.tar
    try:
        model.learn(args.timesteps, callback=[periodic, eval_callback])
    except BaseException as exc:
        logger.close(status="killed" if isinstance(exc, KeyboardInterrupt) else "failed")
        raise
    logger.close(timeout=120)  # the lines below point at the trackers' stores: wait until the agent has filled them

    run_dir = logger.run_dir
    used = logger.config["backends"]["use"]
    print(f"\nrun directory: {run_dir}")
    print(f"best model:    {run_dir / 'ckpt' / 'ckpt_best.zip'} (PPO.load reads it; ckpt_best.pth.tar: torch.load, as DI-engine's)")
    print(f"TensorBoard:   tensorboard --logdir {run_dir / 'log' / 'serial'}")
    if "mlflow" in used:
        print(f"MLflow:        mlflow ui --backend-store-uri sqlite:///{Path(args.root).resolve() / 'mlflow.db'}")
    if "wandb" in used:
        print(f"W&B (offline): wandb sync {run_dir / 'wandb'}/offline-run-*")
    if "trackio" in used:
        project = json.loads((run_dir / "meta.json").read_text()).get("task") or run_dir.name  # the trackio backend's default project
        print(f"trackio:       TRACKIO_DIR={Path(args.root).resolve() / 'trackio'} trackio show --project {project}")
    return run_dir


if __name__ == "__main__":
    main(sys.argv[1:])
