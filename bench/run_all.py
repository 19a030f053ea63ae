"""Runs every benchmark of issue 6, one after the other, each writing its section into RESULTS.md.

Why this exists: one command (`make bench`) for the whole suite. The scripts
run one at a time, never side by side, because on a 2-core machine two
benchmarks would measure each other. Options after `--` are passed to every
script (`--quick` for the CI-sized suite, `--no-write` to print only).

    python bench/run_all.py              # the full suite: an hour or more on a loaded 2-core machine
    python bench/run_all.py --quick      # CI-sized, a few minutes
    python bench/run_all.py --only bench_calls bench_throughput
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Cheapest first, so a short session still gets the quick figures.
SCRIPTS = ["bench_import", "bench_write", "bench_calls", "bench_stages", "bench_throughput", "bench_memory", "bench_training",
           "bench_sb3", "bench_acme_spinup", "bench_tune", "bench_outage", "bench_demo", "bench_sweep", "bench_freshness"]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script")
    parser.add_argument("--no-write", action="store_true", help="pass --no-write to every script")
    parser.add_argument("--only", nargs="+", choices=SCRIPTS, help="run only these scripts")
    args = parser.parse_args()
    options = [flag for flag, on in (("--quick", args.quick), ("--no-write", args.no_write)) if on]
    failed = []
    for name in args.only or SCRIPTS:
        started = time.perf_counter()
        print(f"==> {name} {' '.join(options)}", flush=True)
        code = subprocess.run([sys.executable, str(HERE / f"{name}.py"), *options], cwd=HERE.parent).returncode
        print(f"<== {name}: exit {code} after {time.perf_counter() - started:.0f} s", flush=True)
        if code:
            failed.append(name)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
