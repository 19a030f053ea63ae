"""How long `import rltrack` takes, and which heavy packages it pulls in.

Why this exists: every training script imports rltrack, most use one or two
of its backends; issue 6 asks for `import rltrack` ≤ 150 ms and for none of
torch, mlflow, wandb, neptune, ray, stable_baselines3, tensorboard to be
imported by it (tests/core/test_import_cost.py checks the latter in CI).

Each repetition runs `python -X importtime -c "import rltrack"` in a fresh
interpreter and reads the cumulative time of the `rltrack` line (what the
import costs on top of the interpreter's own start-up), alternating with
`from rltrack import make_logger` (rltrack imports its public names on first
use, so this is what a script that makes a logger pays: the config, pipeline,
filters and local backends) and a bare `python -c pass` whose wall time is
the interpreter start-up.
The slowest imports under rltrack are listed, to show where the time goes.

    python bench/bench_import.py            # 15 repetitions
    python bench/bench_import.py --quick    # 5
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

from report import Section, arguments, verdict

HEAVY = ("torch", "mlflow", "wandb", "neptune", "ray", "stable_baselines3", "tensorboard")
TARGET_MS = 150.0


def importtime(statement: str) -> tuple[float, list[tuple[float, float, str]]]:
    """(wall ms of the interpreter run, [(self µs, cumulative µs, module)] from -X importtime)."""
    t0 = time.perf_counter()
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", statement], capture_output=True, text=True, check=True).stderr
    wall = (time.perf_counter() - t0) * 1000
    rows = []
    for line in err.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            self_us, cumulative_us, name = line[len("import time:") :].split("|")
            rows.append((float(self_us), float(cumulative_us), name.rstrip()))
    return wall, rows


def cumulative_ms(rows: list[tuple[float, float, str]], module: str) -> float:
    """The cumulative import time of `module`'s top-level line, in ms."""
    return sum(cumulative for _, cumulative, name in rows if name == f" {module}") / 1000


def timed_in_process(statement: str) -> float:
    """ms that `statement` takes in a fresh interpreter, timed inside it with perf_counter."""
    code = f"import time; t0 = time.perf_counter(); {statement}; print((time.perf_counter() - t0) * 1000)"
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def heavy_imported() -> list[str]:
    code = f"import sys, json, rltrack; print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    return list(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout))


def main() -> None:
    parser = arguments(__doc__, "5 repetitions")
    parser.add_argument("--repetitions", type=int, default=None, help="default 15, quick 5")
    args = parser.parse_args()
    repetitions = args.repetitions or (5 if args.quick else 15)
    section = Section()
    rltrack_ms, wall_ms, bare_ms, first_use_ms = [], [], [], []
    last_rows: list[tuple[float, float, str]] = []
    for _ in range(repetitions):
        wall, rows = importtime("import rltrack")
        rltrack_ms.append(cumulative_ms(rows, "rltrack"))
        wall_ms.append(wall)
        first_use_ms.append(timed_in_process("from rltrack import make_logger"))
        bare_ms.append(importtime("pass")[0])
        last_rows = last_rows or importtime("from rltrack import make_logger")[1]
    heavy = heavy_imported()
    median = statistics.median(rltrack_ms)
    slowest = sorted(last_rows, key=lambda r: -r[0])[:8]
    body = "\n".join([
        f"{repetitions} fresh interpreters each, alternating.",
        "",
        "| measure | median ms | min–max ms |",
        "|---|---:|---:|",
        f"| `import rltrack` (cumulative, from -X importtime) | {median:.1f} | {min(rltrack_ms):.1f}–{max(rltrack_ms):.1f} |",
        f"| `from rltrack import make_logger` (timed in the interpreter: what making a logger first costs) | {statistics.median(first_use_ms):.1f} "
        f"| {min(first_use_ms):.1f}–{max(first_use_ms):.1f} |",
        f"| `python -X importtime -c \"import rltrack\"`, wall | {statistics.median(wall_ms):.0f} | {min(wall_ms):.0f}–{max(wall_ms):.0f} |",
        f"| `python -X importtime -c pass`, wall (interpreter start-up) | {statistics.median(bare_ms):.0f} | {min(bare_ms):.0f}–{max(bare_ms):.0f} |",
        "",
        "Largest self times under `from rltrack import make_logger` (µs, module): " + ", ".join(f"{s:,.0f} {name.strip()}" for s, _, name in slowest),
        "",
        verdict("`import rltrack`", f"{median:.0f} ms", f"≤ {TARGET_MS:g} ms", median <= TARGET_MS),
        f"- `from rltrack import make_logger` (what a script making a logger pays on first use): {statistics.median(first_use_ms):.0f} ms, "
        "not judged (the target names `import rltrack`); where it goes: see RESULTS.md's \"what limits it\".",
        verdict("heavy packages imported by `import rltrack`", ", ".join(heavy) or "none", "none of " + ", ".join(HEAVY), not heavy),
    ])  # fmt: skip
    section.finish("bench_import: import time of rltrack", body, write=not args.no_write)


if __name__ == "__main__":
    main()
