"""How fast `rltrack compare` answers over 1,000 runs of 10 tasks, beside pandas reading the same progress.csv files.

Writes N run directories in rltrack's own format (meta.json, total_config.py, a
journal of `--points` scalar events each, and the progress.csv the local
backend writes beside it), 10 tasks x 4 learning rates x N/40 seeds, odd seeds
on another env-step grid. Then, each over `--repeat` repetitions:

* `compare`: `rltrack.runs.compare_runs` as `rltrack compare --metric
  collector/reward_mean` runs it (every live run selected through the index,
  scores, the four aggregates, probabilities of improvement, profiles and
  sample-efficiency curves, 2,000 replications): once cold (each run's journal
  read, its series then kept in the index: rltrack.runs.series_cache), then
  `--repeat` times warm (the series read from the index); opening the runs
  (meta.json, config) alone is timed too;
* `pandas`: `pandas.read_csv` of every run's progress.csv and the mean of its
  last 10% of rewards (what a user's own script would do, without statistics);
* the comparison page of `--page-runs` of the runs, opened in headless Chromium:
  the time its script takes to draw every chart, and to redraw them after the
  smoothing slider moves (performance.now() in the page).

Usage:

    python bench/bench_compare.py [--runs 1000] [--points 1000] [--repeat 3] [--page-runs 200] [--root DIR] [--quick] [--no-write]
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from rltrack.core.events import Event  # noqa: E402
from rltrack.runs import compare_runs, refresh  # noqa: E402
from rltrack.runs.select import chosen_runs  # noqa: E402
from report import Section, arguments  # noqa: E402

TASKS = [f"task{i}" for i in range(10)]
RATES = [1e-4, 3e-4, 1e-3, 3e-3]
METRIC = "collector/reward_mean"


def write_run(root: Path, i: int, points: int, rng: np.random.Generator) -> None:
    """One run directory as rltrack's Logger and local backend leave it (the files compare and pandas read)."""
    task, lr, seed = TASKS[i % 10], RATES[(i // 10) % 4], i // 40
    run_dir = root / task / f"lr{lr}_s{seed}"
    run_dir.mkdir(parents=True)
    start = 1_790_000_000 + i * 37.1
    hparams = {"lr": lr, "seed": seed, "env_id": f"{task}-v0"}
    meta = {"name": run_dir.name, "task": task, "start_unix": start, "host": "node0", "ip": "10.0.0.1", "status": "finished",
            "tracked": {"lr": lr, "seed": seed}, "backends": ["local"]}  # fmt: skip
    (run_dir / "meta.json").write_text(json.dumps(meta))
    (run_dir / "total_config.py").write_text(repr({"config": {"run": {"task": task}}, "hparams": hparams}) + "\n")
    spacing = 100 if seed % 2 == 0 else 150
    level = (1 + RATES.index(lr)) * (1 + i % 10) * 10
    rewards = level * (1 - np.exp(-np.arange(points) / (points / 5))) + rng.normal(scale=level * 0.1, size=points)
    lines, rows = [], []
    for it, reward in enumerate(rewards):
        steps = {"env_steps": spacing * it, "train_iter": it}
        lines.append(Event(start + it, {"reward_mean": float(reward)}, namespace="collector", steps=steps, run=run_dir.name).to_json())
        rows.append((start + it, spacing * it, it, float(reward)))
    (run_dir / "journal.jsonl").write_text("\n".join(lines) + "\n")
    with (run_dir / "progress.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["time", "env_steps", "train_iter", METRIC])
        writer.writerows(rows)


def timed(function, repeat: int) -> tuple[list[float], object]:
    seconds, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - t0)
    return seconds, result


def pandas_scores(root: Path) -> int:
    import pandas as pd

    scores = []
    for path in sorted(root.glob("*/*/progress.csv")):
        frame = pd.read_csv(path)
        values = frame[METRIC].dropna().to_numpy()
        scores.append(values[-max(1, math.ceil(len(values) / 10)) :].mean())
    return len(scores)


#: Added to a copy of the page: the time its charts take to draw, and to redraw after the slider moves.
PAGE_TIMER = """<script>
window.addEventListener("load", () => {
  const t0 = performance.now();
  const slider = document.getElementById("rltrack-smooth");
  slider.value = "0.6"; slider.dispatchEvent(new Event("input"));
  const redraw = performance.now() - t0;
  console.log("rltrack-bench " + JSON.stringify({ first: window.rltrackFirstDraw, redraw, paths: document.querySelectorAll("path").length }));
});
</script></body>"""


def page_times(root: Path, runs: int, out: Path) -> dict[str, float] | None:
    """Draw and redraw times of the comparison page of `runs` runs in headless Chromium (None without it)."""
    from rltrack.runs.compare import render_comparison

    executable = shutil.which("chromium")
    if executable is None:
        return None
    chosen, _ = chosen_runs(root, task="task[01]")
    chosen = chosen[:runs]
    text = render_comparison(chosen, f"{len(chosen)} runs", group_by=["lr"])
    start = "<script>window.rltrackT0 = performance.now();</script>"
    text = text.replace('<script type="application/json"', start + '<script type="application/json"', 1)
    text = text.replace("</script></body>", "window.rltrackFirstDraw = performance.now() - window.rltrackT0;</script></body>", 1)
    page = out / "page.html"
    page.write_text(text.replace("</body>", PAGE_TIMER), encoding="utf-8")
    done = subprocess.run(
        [executable, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0", f"--user-data-dir={out / 'profile'}",
         "--dump-dom", "--virtual-time-budget=60000", page.as_uri()], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    found = re.search(r'"rltrack-bench (\{.*?\})"', done.stderr)
    return {**json.loads(found[1]), "runs": len(chosen), "bytes": len(text)} if found else None


def main() -> int:
    parser = arguments(__doc__, "100 runs of 200 points, 1 repetition, a page of 20 runs")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--page-runs", type=int, default=200)
    parser.add_argument("--root", type=Path, help="where to write the runs (default: a temporary directory, removed after)")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.points, args.repeat, args.page_runs = 100, 200, 1, 20
    section = Section()
    out = Path(tempfile.mkdtemp(prefix="bench_compare_"))
    root = args.root or out / "runs"
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for i in range(args.runs):
        write_run(root, i, args.points, rng)
    written = time.perf_counter() - t0
    t0 = time.perf_counter()
    refresh(root)
    indexed = time.perf_counter() - t0
    cold, comparison = timed(lambda: compare_runs(root, metric=METRIC), 1)
    warm, _ = timed(lambda: compare_runs(root, metric=METRIC), args.repeat)
    opened, _ = timed(lambda: chosen_runs(root, all_by_default=True), args.repeat)
    pandas, count = timed(lambda: pandas_scores(root), args.repeat)
    page = page_times(root, args.page_runs, out)
    median = statistics.median
    rows = [
        ("`compare`, cold: each run's journal read (its series then kept in the index)", f"{cold[0]:.2f}", f"{cold[0]:.2f}"),
        ("`compare`, warm: the series read from the index", f"{median(warm):.2f}", f"{max(warm):.2f}"),
        ("… of which selecting and opening the runs (index refresh, meta.json, config)", f"{median(opened):.2f}", f"{max(opened):.2f}"),
        (f"pandas `read_csv` of the {count} progress.csv files and each run's last-10% mean", f"{median(pandas):.2f}", f"{max(pandas):.2f}"),
    ]
    body = [
        f"Setup: {args.runs} run directories ({len(comparison.tasks)} tasks x {len(comparison.groups)} learning rates x "
        f"{args.runs // 40 or 1} seeds, {args.points} points each) written in {written:.1f} s; index built from them in {indexed:.1f} s. "
        f"Every comparison: the four aggregates, the probabilities of improvement, profiles and sample-efficiency curves, "
        f"{comparison.reps} replications.",
        "",
        "| operation | median s | max s |",
        "|---|---:|---:|",
        *(f"| {name} | {mid} | {top} |" for name, mid, top in rows),
    ]
    if page is not None:
        body += ["", f"The comparison page of {page['runs']} runs ({page['bytes'] / 1e6:.1f} MB, one panel, {page['paths']} SVG paths) in "
                 f"headless Chromium: its charts drawn in {page['first']:.0f} ms, redrawn after the smoothing slider moved in {page['redraw']:.0f} ms."]
    section.finish("bench_compare: `rltrack compare` over runs of 10 tasks, beside pandas", "\n".join(body), write=not args.no_write)
    if args.root is None:
        shutil.rmtree(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
