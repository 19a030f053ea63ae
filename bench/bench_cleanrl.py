"""CleanRL's own script, unchanged, with and without rltrack, and with W&B's `sync_tensorboard` (issue 34).

Three ways to run CleanRL 1.2.0's `ppo.py` (default) or `dqn.py` (`--script
dqn`), as installed from PyPI in the oldest environment, on CartPole-v1, same
seed, CPU, torch on one thread. `ppo.py` is written against gym 0.23: it runs
with the overlay `make test-oldest` installs (`.venv-oldest/cleanrl-ppo`,
requirements/test-oldest-cleanrl-ppo.txt) first on its PYTHONPATH, as in
tests/frameworks/test_tensorboard_frameworks.py.

  * plain      `python ppo.py ...`
  * rltrack    `python -m rltrack.cli run --config <local + mlflow (SQLite file) + wandb (offline)> -- python ppo.py ...`
  * wandb-sync `python ppo.py ... --track` with WANDB_MODE=offline: CleanRL's own W&B
               path, `wandb.init(sync_tensorboard=True, ...)`

Every rltrack run delivers to one MLflow store that exists before the first
timed run, as a user's does after their first run (`--new-store`: a new
SQLite file per run, whose schema migration is a one-time cost of about
a second).

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
    python bench/bench_cleanrl.py --fixed-cost --repetitions 3     # rltrack's cost per run, per tracker

`--fixed-cost` runs a script that writes one value, plainly and under
`rltrack run` with each set of trackers: what starting the launcher, the
agent and each tracker's client costs a run whatever its length.
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

BACKENDS = ("local", "mlflow", "wandb")
#: name -> (the backends of `rltrack run`, None: without rltrack; with W&B's `sync_tensorboard`)
VARIANTS: dict[str, tuple[tuple[str, ...] | None, bool]] = {"plain": (None, False), "rltrack": (BACKENDS, False), "wandb-sync": (None, True)}
#: `--fixed-cost`: what rltrack costs whatever the run's length, per tracker: a script writing one value.
FIXED_VARIANTS: dict[str, tuple[tuple[str, ...] | None, bool]] = {
    "plain": (None, False),
    "rltrack local": (("local",), False),
    "rltrack local+mlflow": (("local", "mlflow"), False),
    "rltrack local+wandb": (("local", "wandb"), False),
    "rltrack local+mlflow+wandb": (BACKENDS, False),
}
ONE_VALUE = "from torch.utils.tensorboard import SummaryWriter\nw = SummaryWriter('runs/one')\nw.add_scalar('charts/episodic_return', 1.0, 1)\nw.close()"
#: prctl's option that makes the caller adopt the orphans of its descendants (linux/prctl.h).
PR_SET_CHILD_SUBREAPER = 36
#: The value whose count is checked in the trackers: its native tag, and its name in an rltrack run.
CHECKED_TAG, CHECKED_NAME = "charts/episodic_return", "charts/episodic_return"  # stored as written


#: Where `make test-oldest` installs the gym 0.23 that `ppo.py` needs, put first on its PYTHONPATH.
PPO_OVERLAY = Path(sys.prefix) / "cleanrl-ppo"


def cleanrl_script(name: str) -> str:
    spec = importlib.util.find_spec(f"cleanrl.{name}")  # its path, not imported
    if spec is None or not spec.origin:
        sys.exit("cleanrl is not installed here: run in the oldest environment (make test-oldest installs cleanrl 1.2.0)")
    if name == "ppo" and not (PPO_OVERLAY / "gym").is_dir():
        sys.exit(f"ppo.py needs gym 0.23.1 in {PPO_OVERLAY}: make test-oldest installs it")
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


def cleanrl_command(name: str, steps: int) -> list[str]:
    common = [sys.executable, cleanrl_script(name), "--seed", "1", "--cuda", "False", "--total-timesteps", str(steps)]
    if name == "dqn":
        return [*common, "--learning-starts", str(min(10_000, steps // 5)), "--train-frequency", "10"]
    return common  # ppo.py's defaults: 4 envs x 128 steps per update


def made_store(database: Path) -> str:
    """An MLflow SQLite store made (its schema migrated) before the timed runs."""
    uri = f"sqlite:///{database}"
    subprocess.run([sys.executable, "-c", f"import mlflow; mlflow.MlflowClient({uri!r}).search_experiments()"], check=True,
                   env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}, capture_output=True)  # fmt: skip
    return uri


def command(script: list[str], backends: tuple[str, ...] | None, wandb_sync: bool, config: Path) -> list[str]:
    if backends is not None:
        return [sys.executable, "-m", "rltrack.cli", "run", "--config", str(config), "--", *script]
    if wandb_sync:
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


def run_once(name: str, script: list[str], scratch: Path, check: bool, store: str | None, path: list[str]) -> tuple[float, float, float]:
    """(wall s of the script, CPU s of the script's tree at its exit, CPU s of
    everything the run started); `path`: directories the script needs first on its PYTHONPATH."""
    backends, wandb_sync = {**VARIANTS, **FIXED_VARIANTS}[name]
    workdir = scratch / f"{name.replace(' ', '_').replace('+', '_')}-{time.monotonic_ns()}"
    workdir.mkdir()
    config = workdir / "rltrack.toml"
    new_store = f"sqlite:///{workdir / 'mlflow.db'}"
    config.write_text(
        f'[run]\nroot = "{workdir / "rl"}"\nclose_timeout = 0\n\n[backends]\nuse = {json.dumps(list(backends or ()))}\n\n'
        f'[backends.mlflow]\ntracking_uri = "{store or new_store}"\nexperiment = "bench"\n'
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(REPO)]), "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "MLFLOW_DISABLE_TELEMETRY": "true", "HOME": str(workdir), "RLTRACK_AGENT_IDLE": "2"}  # fmt: skip
    cpu_before = children_cpu()
    started = time.perf_counter()
    done = subprocess.run(command(script, backends, wandb_sync, config), cwd=workdir, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    cpu_script = children_cpu() - cpu_before
    if done.returncode != 0:
        sys.exit(f"{name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    wait_for_every_descendant()  # rltrack's agent ends its delivery, then idles out
    cpu_all = children_cpu() - cpu_before
    checked = check_delivered(workdir) if check and backends == BACKENDS else ""
    print(f"  {name}: wall {wall:.1f} s, CPU {cpu_all:.1f} s ({cpu_script:.1f} s by the script's tree at its exit){checked}", flush=True)
    return wall, cpu_script, cpu_all


def row(values: list[float], reference: float) -> str:
    median = statistics.median(values)
    return f"{median:.1f} | {min(values):.1f}-{max(values):.1f} | {median / reference:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write every run's figures to this file, after each run")
    parser.add_argument("--script", choices=("ppo", "dqn"), default="ppo", help="CleanRL's script (default ppo)")
    parser.add_argument("--new-store", action="store_true", help="a new MLflow SQLite file per run instead of one made beforehand")
    parser.add_argument("--fixed-cost", action="store_true", help="instead: a script writing one value, plain and under rltrack per tracker")
    args = parser.parse_args()
    adopt_orphans()
    scratch = Path(tempfile.mkdtemp(prefix="bench_cleanrl_"))
    variants = list(FIXED_VARIANTS if args.fixed_cost else VARIANTS)
    script = [sys.executable, "-c", ONE_VALUE] if args.fixed_cost else cleanrl_command(args.script, args.steps)
    store = None if args.new_store else made_store(scratch / "mlflow.db")
    path = [str(PPO_OVERLAY)] if not args.fixed_cost and args.script == "ppo" else []
    figures: dict[str, dict[str, list[float]]] = {v: {"wall": [], "cpu_script": [], "cpu": []} for v in variants}
    loads = [os.getloadavg()[0]]
    try:
        for repetition in range(args.repetitions):
            order = variants[repetition % len(variants) :] + variants[: repetition % len(variants)]
            print(f"repetition {repetition + 1} ({', '.join(order)}), load {os.getloadavg()[0]:.1f}", flush=True)
            for variant in order:
                for name, value in zip(("wall", "cpu_script", "cpu"), run_once(variant, script, scratch, not args.fixed_cost, store, path)):
                    figures[variant][name].append(value)
                loads.append(os.getloadavg()[0])
                if args.json:
                    args.json.write_text(json.dumps({"steps": args.steps, "loads": loads, "figures": figures}, indent=1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    what = "a script writing one value" if args.fixed_cost else f"CleanRL 1.2.0 {args.script}.py, CartPole-v1, {args.steps} steps"
    what += ", a new MLflow store per run" if args.new_store else ", one MLflow store made beforehand"
    print(f"\n{what}, {args.repetitions} repetition(s), load {min(loads):.1f}-{max(loads):.1f}")
    print("| variant | wall median s | wall min-max s | wall x plain | CPU median s | CPU min-max s | CPU x plain "
          "| CPU of the script's tree at exit, median s | min-max s | x plain |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    plain = figures["plain"]
    for variant, values in figures.items():
        cells = [row(values[name], statistics.median(plain[name])) for name in ("wall", "cpu", "cpu_script")]
        print(f"| {variant} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
