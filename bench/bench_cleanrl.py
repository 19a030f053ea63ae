"""CleanRL's own script, unchanged, with and without rltrack, and with W&B's `sync_tensorboard` (issue 34).

Three ways to run CleanRL 1.2.0's `dqn.py` (installed from PyPI in the oldest
environment; its `ppo.py` needs gym 0.23.1, which that environment cannot hold
beside DI-engine's gym 0.25.1) on CartPole-v1, same seed, CPU, torch on one
thread:

  * plain      `python dqn.py ...`
  * rltrack    `python -m rltrack.cli run --config <local + mlflow (SQLite file) + wandb (offline)> -- python dqn.py ...`
  * wandb-sync `python dqn.py ... --track` with WANDB_MODE=offline: CleanRL's own W&B
               path, `wandb.init(sync_tensorboard=True, ...)`

The figure is the script's wall time, from start to exit. rltrack's agent
delivers to the trackers in its own process, at the lowest priority; the
config sets `run.close_timeout = 0`, so the script's exit does not wait for
the trackers (by default `close` waits up to `run.close_timeout` for them,
which a user sees at exit); the agent's delivery after it is waited for,
untimed, before the next variant starts.
The variants alternate, rotated each repetition; median and
range per variant, and the ratio of medians to plain. Goal: rltrack ≤ 1.03×
plain.

    python bench/bench_cleanrl.py --steps 50000 --repetitions 3   # the issue's figure, tens of minutes
    python bench/bench_cleanrl.py --steps 5000 --repetitions 1    # minutes
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("plain", "rltrack", "wandb-sync")


def dqn_script() -> str:
    spec = importlib.util.find_spec("cleanrl.dqn")
    if spec is None or not spec.origin:
        sys.exit("cleanrl is not installed here: run in the oldest environment (make test-oldest installs cleanrl 1.2.0)")
    return spec.origin


def command(variant: str, steps: int, config: Path) -> list[str]:
    script = [sys.executable, dqn_script(), "--seed", "1", "--cuda", "False", "--total-timesteps", str(steps),
              "--learning-starts", str(min(10_000, steps // 5)), "--train-frequency", "10"]  # fmt: skip
    if variant == "rltrack":
        return [sys.executable, "-m", "rltrack.cli", "run", "--config", str(config), "--", *script]
    if variant == "wandb-sync":
        return [*script, "--track", "--wandb-project-name", "bench"]
    return script


def run_once(variant: str, steps: int, scratch: Path) -> float:
    workdir = scratch / f"{variant}-{time.monotonic_ns()}"
    workdir.mkdir()
    config = workdir / "rltrack.toml"
    config.write_text(
        f'[run]\nroot = "{workdir / "rl"}"\nclose_timeout = 0\n\n[backends]\nuse = ["local", "mlflow", "wandb"]\n\n'
        f'[backends.mlflow]\ntracking_uri = "sqlite:///{workdir / "mlflow.db"}"\nexperiment = "bench"\n'
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "MLFLOW_DISABLE_TELEMETRY": "true", "HOME": str(workdir)}  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command(variant, steps, config), cwd=workdir, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{variant} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    for run_dir in (p.parent for p in (workdir / "rl").glob("*/meta.json")):  # untimed: the agent ends its delivery
        sync = [sys.executable, "-m", "rltrack.cli", "sync", str(run_dir)]  # before the next variant runs (exit 2: still busy)
        while subprocess.run(sync, cwd=workdir, env=env, capture_output=True, check=False).returncode == 2:
            time.sleep(1.0)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench_cleanrl_"))
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        for repetition in range(args.repetitions):
            order = VARIANTS[repetition % 3 :] + VARIANTS[: repetition % 3]
            for variant in order:
                times[variant].append(run_once(variant, args.steps, scratch))
                print(f"repetition {repetition + 1} {variant}: {times[variant][-1]:.1f} s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    plain = statistics.median(times["plain"])
    print(f"\nCleanRL 1.2.0 dqn.py, CartPole-v1, {args.steps} steps, {args.repetitions} repetition(s), load {os.getloadavg()[0]:.1f}")
    print(f"{'variant':<11} {'median s':>9} {'min-max s':>15} {'x plain':>8}")
    for variant, values in times.items():
        median = statistics.median(values)
        print(f"{variant:<11} {median:>9.1f} {min(values):>7.1f}-{max(values):<7.1f} {median / plain:>8.3f}")


if __name__ == "__main__":
    main()
