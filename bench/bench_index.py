"""How fast the experiment database answers over 10,000 runs.

Writes N synthetic run directories in rltrack's own format (meta.json,
total_config.py, a journal of 20 scalar events in two namespaces, canonical
reward names), builds the SQLite index from them (`rltrack.runs.refresh`),
then times, each over several repetitions:

* `query` answered from the index (`refresh_index=False`): all runs; a where
  over two hyperparameters sorted by a metric's best value; a task filter;
* `runs ls` as the CLI does it (a refresh, i.e. stat of every run's files,
  then the query) when nothing changed;
* `resolve` of a run id.

The target is a query under 200 ms at 10,000 runs. Usage:

    python bench/bench_index.py [--runs 10000] [--repeat 5] [--root DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rltrack  # noqa: E402
from rltrack.core.events import Event  # noqa: E402
from rltrack.runs import query, refresh, resolve  # noqa: E402

ENVS = ["CartPole-v1", "Pendulum-v1", "HalfCheetah-v4", "Hopper-v4"]
TASKS = ["cartpole_ppo", "pendulum_sac", "cheetah_td3", "hopper_ppo"]


def write_run(root: Path, i: int, rng: random.Random) -> None:
    """One run directory as rltrack's Logger leaves it (the files the index reads)."""
    run_dir = root / TASKS[i % 4] / f"run_{i:05d}"
    run_dir.mkdir(parents=True)
    start = 1_790_000_000 + i * 37.123457
    hparams = {"env_id": ENVS[i % 4], "lr": rng.choice([1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2]), "seed": i % 5, "gamma": 0.99}
    meta = {"name": run_dir.name, "task": TASKS[i % 4], "start_unix": start, "host": f"node{i % 7}", "ip": "10.0.0.1",
            "status": rng.choice(["finished", "finished", "failed", "killed"]), "tracked": {"env_id": hparams["env_id"], "lr": hparams["lr"]},
            "backends": ["local"]}
    (run_dir / "meta.json").write_text(json.dumps(meta))
    (run_dir / "total_config.py").write_text(repr({"config": {"run": {"task": TASKS[i % 4]}}, "hparams": hparams}) + "\n")
    lines = []
    for it in range(10):
        steps = {"env_steps": 1000 * it, "train_iter": it}
        reward = rng.gauss(100 * it * hparams["lr"] * 100, 5)
        lines.append(Event(start + it, {"reward_mean": reward}, namespace="collector", steps=steps, run=run_dir.name).to_json())
        lines.append(Event(start + it, {"reward_mean": reward * 1.1, "total_loss_avg": 1 / (it + 1)}, namespace="evaluator", steps=steps, run=run_dir.name).to_json())
    (run_dir / "journal.jsonl").write_text("\n".join(lines) + "\n")


def timed(function, repeat: int) -> tuple[float, float, object]:
    """(median ms, max ms, last result) over `repeat` calls."""
    samples, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = function()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples), max(samples), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--root", type=Path, help="where to write the synthetic runs (default: a temporary directory)")
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="bench_index_"))
    rng = random.Random(0)
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    for i in range(args.runs):
        write_run(root, i, rng)
    written = time.perf_counter() - t0
    t0 = time.perf_counter()
    counts = refresh(root)
    built = time.perf_counter() - t0
    assert counts["added"] == args.runs, counts
    some_id = query(root, refresh_index=False)["id"].iloc[args.runs // 2]

    where = "lr < 0.01 and env_id == 'CartPole-v1'"
    cases = [
        ("query: all runs (DataFrame of every index row)", lambda: query(root, refresh_index=False)),
        (f'query: where "{where}", sort -best/evaluator/reward_mean',
         lambda: query(root, where=where, sort="-best/evaluator/reward_mean", refresh_index=False)),
        ("query: task == cartpole_ppo", lambda: query(root, task="cartpole_ppo", refresh_index=False)),
        ("query: where status == 'failed' and seed in (0, 1)", lambda: query(root, where="status == 'failed' and seed in (0, 1)", refresh_index=False)),
        ("refresh with nothing changed (stat of every run's files)", lambda: refresh(root)),
        ("refresh + where query (what `runs ls --where` does)", lambda: query(root, where=where)),
        ("resolve a full run id", lambda: resolve(root, some_id)),
    ]
    rows = []
    for name, function in cases:
        median, worst, result = timed(function, args.repeat)
        size = len(result) if hasattr(result, "__len__") and not isinstance(result, (str, Path)) else "-"
        rows.append((name, median, worst, size))

    import pandas

    print(f"## bench_index: the experiment database over {args.runs:,} runs ({time.strftime('%Y-%m-%d')})\n")
    print(f"Command: `python bench/bench_index.py --runs {args.runs} --repeat {args.repeat}` (from the repository root)  ")
    print(f"Machine: {os.cpu_count()} CPUs ({platform.machine()}), load average {' '.join(f'{x:.2f}' for x in load_start)} at start, "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at end; Python {platform.python_version()} on {platform.system()}; "
          f"rltrack {rltrack.__version__}, SQLite {__import__('sqlite3').sqlite_version}, pandas {pandas.__version__}  ")
    print(f"Setup: {args.runs:,} run directories written in {written:.1f} s; index built from them in {built:.1f} s "
          f"({(root / 'rltrack_index.db').stat().st_size / 1e6:.1f} MB).\n")
    print("| operation | median ms | max ms | rows |")
    print("|---|---:|---:|---:|")
    for name, median, worst, size in rows:
        print(f"| {name} | {median:.1f} | {worst:.1f} | {size} |")


if __name__ == "__main__":
    main()
