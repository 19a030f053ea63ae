"""The demo with and without trackio (issue 20).

Why this exists: issue 20 adds trackio to the demo (`make demo`, that is
examples/sb3_ppo_cartpole.py on its embedded defaults) only "if it stays
within a few seconds of today's demo". This script runs the demo as a user
does, a fresh process each time, with its default backends (local, console,
MLflow on a SQLite file, W&B offline, trackio) and with the same list less
trackio, alternating, the order rotated each repetition. Each run gets a run
root and an agent directory of its own (the agent starts cold, as on a
user's first demo), so one run's agent or stores do not carry into the next.
Timed: the whole process, from its start to its exit (the demo's `close()`
waits up to `run.close_timeout` for the agent). Untimed afterwards: the run's
`progress.csv` and, for the trackio variant, the rows of trackio's `metrics`
table in the project's SQLite file (once the agent, which goes on after the
demo exits, has written them).

    python bench/bench_demo.py                 # 3 repetitions per variant
    python bench/bench_demo.py --quick         # 1 repetition
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import REPO, Section, arguments, verdict

DEMO = REPO / "examples" / "sb3_ppo_cartpole.py"
WITH = "local,console,mlflow,wandb,trackio"  # the demo's default
WITHOUT = "local,console,mlflow,wandb"
VARIANTS = {"with trackio (the demo's default)": WITH, "without trackio": WITHOUT}
#: "within a few seconds of today's demo"
TARGET_EXTRA_S = 3.0


def run_demo(work: Path, backends: str) -> dict[str, float | int]:
    root = work / "runs"
    env = {**os.environ, "RLTRACK_AGENT_DIR": str(work / "agent"), "WANDB_SILENT": "true"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(DEMO), "--root", str(root), "--backends", backends], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"the demo failed ({backends}):\n{done.stderr[-3000:]}")
    (run_dir,) = [p for p in root.iterdir() if (p / "meta.json").is_file()]
    rows = sum(1 for _ in (run_dir / "progress.csv").open()) - 1
    return {"wall": wall, "rows": rows, "trackio_values": trackio_values(root / "trackio") if "trackio" in backends else 0}


def trackio_values(store: Path) -> int:
    """Values in trackio's store once the agent has delivered (it goes on after the demo exits)."""
    import sqlite3

    deadline = time.monotonic() + 120
    count = 0
    while time.monotonic() < deadline:
        dbs = list(store.glob("*.db"))
        if dbs:
            with sqlite3.connect(dbs[0]) as db:
                count = db.execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
            if count:
                return count
        time.sleep(1)
    return count


def main() -> None:
    parser = arguments(__doc__ or "", "1 repetition per variant")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    repetitions = 1 if args.quick else args.repetitions
    section = Section()
    walls: dict[str, list[float]] = {label: [] for label in VARIANTS}
    lines = []
    with tempfile.TemporaryDirectory(prefix="rltrack-bench-demo-") as tmp:
        for rep in range(repetitions):
            order = list(VARIANTS.items())[rep % 2 :] + list(VARIANTS.items())[: rep % 2]
            for label, backends in order:
                work = Path(tmp) / f"{rep}_{len(walls[label])}_{backends.count(',')}"
                work.mkdir()
                r = run_demo(work, backends)
                walls[label].append(float(r["wall"]))
                print(f"  {label}: {r['wall']:.1f} s", flush=True)
                lines.append(f"- repetition {rep + 1}, {label}: {r['wall']:.1f} s; progress.csv {r['rows']} rows"
                             + (f"; trackio's store {r['trackio_values']:,} metric rows" if "trackio" in backends else ""))  # fmt: skip
    med = {label: statistics.median(w) for label, w in walls.items()}
    extra = med["with trackio (the demo's default)"] - med["without trackio"]
    table = ["| demo backends | wall s: median (min–max) |", "|---|---:|"]
    table += [f"| {label} (`--backends {VARIANTS[label]}`) | {med[label]:.1f} ({min(w):.1f}–{max(w):.1f}) |" for label, w in walls.items()]
    body = "\n".join([
        f"`examples/sb3_ppo_cartpole.py` (PPO, CartPole-v1, 5000 steps) as a fresh process, {repetitions} repetition(s) per variant, "
        "alternating; each run with a run root and an agent directory of its own (a cold agent). Timed: the process from start to exit.",
        "", *table, "", *lines, "", "Verdict:", "",
        verdict("the demo with trackio, beyond the demo without it", f"{extra:+.1f} s", f"≤ {TARGET_EXTRA_S:.0f} s (\"within a few seconds\")",
                extra <= TARGET_EXTRA_S),
    ])  # fmt: skip
    section.finish("bench_demo: the demo with and without trackio", body, write=not args.no_write)


if __name__ == "__main__":
    main()
