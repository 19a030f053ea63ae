"""CleanRL's own script, unchanged, with and without rltrack, and with W&B's `sync_tensorboard` (issue 34).

Three ways to run CleanRL 1.2.0's `dqn.py` (installed from PyPI in the oldest
environment; its `ppo.py` imports `gym`, and the oldest environment's gym
0.25.1, DI-engine's pin, fails in it: `RandomNumberGenerator._generator_ctor()`
under numpy 1.26, so DQN stands in for PPO) on CartPole-v1, same seed, CPU,
torch on one thread:

  * plain      `python dqn.py ...`
  * rltrack    `python -m rltrack.cli run --config <local + mlflow (SQLite file) + wandb (offline)> -- python dqn.py ...`
  * wandb-sync `python dqn.py ... --track` with WANDB_MODE=offline: CleanRL's own W&B
               path, `wandb.init(sync_tensorboard=True, ...)`

Two figures per run:

  * wall: the script's wall time, from start to exit (what a user waits for).
    rltrack's config sets `run.close_timeout = 0`, so the exit does not wait
    for the trackers; its agent delivers in its own process.
  * CPU: user + system seconds of every process the run made, until the last
    one exited: the script, the launcher, W&B's `wandb-core`, and rltrack's
    agent with its keeper and tracker clients, which leave the script's
    process tree on purpose (rltrack.agent.keeper). This process becomes the
    child subreaper of its tree (Linux `prctl(PR_SET_CHILD_SUBREAPER)`), so
    those orphans are its children too: it waits for every one of them
    (the agent exits `RLTRACK_AGENT_IDLE` = 2 s after its last delivery) and
    `getrusage(RUSAGE_CHILDREN)` counts them all. CPU time is what rltrack
    adds to a machine, and it barely moves with the neighbours' load, which
    makes the wall time of one run on a shared machine spread by 3x.

The variants alternate, the order rotated each repetition (ABC, BCA, CAB,
...), so a change of load hits every variant alike; median and range per
variant, the ratio of medians to plain. Goal: rltrack <= 1.03x plain.
After each rltrack run, the values MLflow and the W&B run file hold are
counted against the event file's (`charts/episodic_return`): a run whose
delivery was not complete would under-count the agent's CPU.

    python bench/bench_cleanrl.py --steps 50000 --repetitions 3   # the issue's figure
    python bench/bench_cleanrl.py --steps 5000 --repetitions 1    # minutes
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from trackers import mlflow_count, wandb_count  # noqa: E402

VARIANTS = ("plain", "rltrack", "wandb-sync")
#: prctl's option that makes the caller adopt the orphans of its descendants (linux/prctl.h).
PR_SET_CHILD_SUBREAPER = 36
#: The value whose count is checked in the trackers: its native tag, and its name in an rltrack run.
CHECKED_TAG, CHECKED_NAME = "charts/episodic_return", "collector/episodic_return"


def dqn_script() -> str:
    spec = importlib.util.find_spec("cleanrl.dqn")
    if spec is None or not spec.origin:
        sys.exit("cleanrl is not installed here: run in the oldest environment (make test-oldest installs cleanrl 1.2.0)")
    return spec.origin


def adopt_orphans() -> None:
    """Makes this process the subreaper of its descendants: an orphan (rltrack's agent) becomes its child."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"prctl(PR_SET_CHILD_SUBREAPER) failed (errno {ctypes.get_errno()}): this bench needs Linux")


def wait_for_every_descendant() -> None:
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def command(variant: str, steps: int, config: Path) -> list[str]:
    script = [sys.executable, dqn_script(), "--seed", "1", "--cuda", "False", "--total-timesteps", str(steps),
              "--learning-starts", str(min(10_000, steps // 5)), "--train-frequency", "10"]  # fmt: skip
    if variant == "rltrack":
        return [sys.executable, "-m", "rltrack.cli", "run", "--config", str(config), "--", *script]
    if variant == "wandb-sync":
        return [*script, "--track", "--wandb-project-name", "bench"]
    return script


def event_file_count(workdir: Path) -> int:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (logdir,) = {p.parent for p in (workdir / "runs").glob("*/events.out.tfevents.*")}
    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return len(accumulator.Scalars(CHECKED_TAG))


def check_delivered(workdir: Path) -> str:
    """The checked value's count in the event file, MLflow and W&B's run file; exits when they differ."""
    (run_dir,) = (p.parent for p in (workdir / "rl").glob("*/meta.json"))
    counts = (event_file_count(workdir), mlflow_count(run_dir, CHECKED_NAME), wandb_count(run_dir, CHECKED_NAME))
    if len(set(counts)) != 1:
        sys.exit(f"{run_dir}: {CHECKED_TAG} has {counts[0]} values in the event file, {counts[1]} in MLflow, {counts[2]} in W&B")
    return f", {counts[0]} returns in MLflow and W&B"


def run_once(variant: str, steps: int, scratch: Path) -> tuple[float, float, float]:
    """(wall s of the script, CPU s of the script's tree at its exit, CPU s of everything the run started)."""
    workdir = scratch / f"{variant}-{time.monotonic_ns()}"
    workdir.mkdir()
    config = workdir / "rltrack.toml"
    config.write_text(
        f'[run]\nroot = "{workdir / "rl"}"\nclose_timeout = 0\n\n[backends]\nuse = ["local", "mlflow", "wandb"]\n\n'
        f'[backends.mlflow]\ntracking_uri = "sqlite:///{workdir / "mlflow.db"}"\nexperiment = "bench"\n'
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "MLFLOW_DISABLE_TELEMETRY": "true", "HOME": str(workdir), "RLTRACK_AGENT_IDLE": "2"}  # fmt: skip
    cpu_before = children_cpu()
    started = time.perf_counter()
    done = subprocess.run(command(variant, steps, config), cwd=workdir, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    cpu_script = children_cpu() - cpu_before
    if done.returncode != 0:
        sys.exit(f"{variant} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    wait_for_every_descendant()  # rltrack's agent ends its delivery, then idles out
    cpu_all = children_cpu() - cpu_before
    checked = check_delivered(workdir) if variant == "rltrack" else ""
    print(f"  {variant}: wall {wall:.1f} s, CPU {cpu_all:.1f} s ({cpu_script:.1f} s by the script's tree at its exit){checked}", flush=True)
    return wall, cpu_script, cpu_all


def row(values: list[float], reference: float) -> str:
    median = statistics.median(values)
    return f"{median:.1f} | {min(values):.1f}-{max(values):.1f} | {median / reference:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write every run's figures to this file, after each run")
    args = parser.parse_args()
    adopt_orphans()
    scratch = Path(tempfile.mkdtemp(prefix="bench_cleanrl_"))
    figures: dict[str, dict[str, list[float]]] = {v: {"wall": [], "cpu_script": [], "cpu": []} for v in VARIANTS}
    loads = [os.getloadavg()[0]]
    try:
        for repetition in range(args.repetitions):
            order = VARIANTS[repetition % 3 :] + VARIANTS[: repetition % 3]
            print(f"repetition {repetition + 1} ({', '.join(order)}), load {os.getloadavg()[0]:.1f}", flush=True)
            for variant in order:
                for name, value in zip(("wall", "cpu_script", "cpu"), run_once(variant, args.steps, scratch)):
                    figures[variant][name].append(value)
                loads.append(os.getloadavg()[0])
                if args.json:
                    args.json.write_text(json.dumps({"steps": args.steps, "loads": loads, "figures": figures}, indent=1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nCleanRL 1.2.0 dqn.py, CartPole-v1, {args.steps} steps, {args.repetitions} repetition(s), load {min(loads):.1f}-{max(loads):.1f}")
    print("| variant | wall median s | wall min-max s | wall x plain | CPU median s | CPU min-max s | CPU x plain "
          "| CPU of the script's tree at exit, median s | min-max s | x plain |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    plain = figures["plain"]
    for variant, values in figures.items():
        cells = [row(values[name], statistics.median(plain[name])) for name in ("wall", "cpu", "cpu_script")]
        print(f"| {variant} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
