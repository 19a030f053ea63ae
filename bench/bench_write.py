"""What one `write` of a 10-scalar record costs the training thread, side by side.

Why this exists: rltrack's first promise is that the training loop does almost
nothing when it logs (design.md §2; issue 2 asks for median <= 10 us per record
on the calling thread, and all records on disk within 1 s after a burst). This
script checks that promise against what users pay without rltrack, in one
process, alternating between systems in rounds so that machine noise hits all
of them alike (on a shared machine the ratios mean more than the microseconds):

  * bare capture   - append a copy of the dict to a list: the floor;
  * rltrack        - make_logger with the four filters (none, smoothing "reward",
                     aggregate "loss", time) and the local backend; twice: time
                     filter 0.5 s (most records dropped in the background), and
                     1 ns (every record reaches the journal, tfevents, csv, text log);
  * SB3            - stable_baselines3 Logger with csv+json+tensorboard: 10 x record() + dump();
  * Acme           - CSVLogger wrapped in NoneFilter and TimeFilter: time_delta 0
                     (every record written, the reference) and 0.5 s (most dropped).

Each call is timed with perf_counter_ns around the library call only. Between
blocks each system is settled untimed (rltrack.flush(), SB3's tensorboard
writer flushed), so no system's background backlog is billed to the next one.

Those blocks last a few ms, too short for rltrack's pipeline thread to wake up
and compete for the GIL, so one more rltrack row times writes made while the
pipeline thread is busy draining a backlog, 50 us of Python "training" apart.

Then a burst: N records into a fresh rltrack logger (time filter 1 ns), and the
time after the last write until the journal holds all N lines, and until
close() returns.

    python bench/bench_write.py                  # full run, under a minute
    python bench/bench_write.py --quick          # CI-sized, a few seconds
    python bench/bench_write.py --write-results  # also rewrite the generated part of bench/RESULTS.md
    python bench/bench_write.py --profile        # only the burst, with cProfile on the pipeline thread
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import math
import os
import platform
import pstats
import shlex
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import rltrack  # noqa: E402

RESULTS = REPO / "bench" / "RESULTS.md"
BEGIN, END = "<!-- bench_write:begin -->", "<!-- bench_write:end -->"

KEYS = ["reward_mean", "reward_max", "episode_len", "loss", "value_loss",
        "policy_loss", "entropy", "lr", "fps", "grad_norm"]  # 2 smoothed, 3 aggregated

BUSY = "rltrack, time 1 ns, pipeline busy (see note)"

TARGET_MEDIAN_US = 10.0
TARGET_ON_DISK_S = 1.0


def records(n: int) -> list[dict[str, float]]:
    """n records of 10 Python floats, built before any timing."""
    return [{key: i * 0.001 + j for j, key in enumerate(KEYS)} for i in range(n)]


def rltrack_config(root: str, name: str, seconds: float) -> dict[str, Any]:
    return {
        "run": {"root": root, "name": name},
        "filters": [
            {"type": "none"},
            {"type": "smoothing", "regex": "reward"},
            {"type": "aggregate", "regex": "loss"},
            {"type": "time", "seconds": seconds},
        ],
        "backends": {"use": ["local"]},
    }


# ---- the systems ---------------------------------------------------------
# Each returns (call, settle, close): `call(record, i)` is what gets timed;
# `settle()` runs untimed after each block; `close()` at the end.

System = tuple[Callable[[dict, int], None], Callable[[], None], Callable[[], None]]


def bare_capture(tmp: Path) -> System:
    captured: list[dict] = []
    return (lambda rec, i: captured.append(dict(rec))), captured.clear, captured.clear


def rltrack_logger(tmp: Path, seconds: float) -> System:
    logger = rltrack.make_logger(rltrack_config(str(tmp), f"rltrack_{seconds:g}s", seconds))
    write = logger.write

    def call(rec: dict, i: int) -> None:
        write(rec, step=i, namespace="learner")

    return call, logger.flush, logger.close


def sb3_logger(tmp: Path) -> System:
    from stable_baselines3.common.logger import configure

    logger = configure(str(tmp / "sb3"), ["csv", "json", "tensorboard"])

    def call(rec: dict, i: int) -> None:  # rec holds "train/<key>" keys, as SB3 users log
        for key, value in rec.items():
            logger.record(key, value)
        logger.dump(step=i)

    def settle() -> None:
        for fmt in logger.output_formats:
            writer = getattr(fmt, "writer", None)
            if writer is not None:
                writer.flush()

    return call, settle, logger.close


def acme_logger(tmp: Path, time_delta: float) -> System:
    if "launchpad" not in sys.modules:
        try:
            import launchpad  # noqa: F401
        except ImportError:
            # STAND-IN, not the real dm-launchpad (no wheels for this Python):
            # `import acme` imports launchpad only to register a stop handler.
            standin = types.ModuleType("launchpad")
            standin.__doc__ = "rltrack bench stand-in for dm-launchpad; not the real package"
            standin.register_stop_handler = lambda handler: None
            standin.unregister_stop_handler = lambda handler: None
            sys.modules["launchpad"] = standin
    from acme.utils.loggers import csv as acme_csv
    from acme.utils.loggers import filters as acme_filters

    inner = acme_csv.CSVLogger(str(tmp / f"acme_{time_delta:g}s"), label="learner", add_uid=False)
    logger = acme_filters.TimeFilter(acme_filters.NoneFilter(inner), time_delta)
    return (lambda rec, i: logger.write(rec)), (lambda: None), logger.close


# ---- measuring -------------------------------------------------------------

def time_block(call: Callable[[dict, int], None], recs: list[dict], start: int, samples: list[int],
               work_ns: int = 0) -> None:
    """Times each call; `work_ns` of untimed pure-Python spinning between calls
    stands in for a training step (it holds the GIL, as Python training code does)."""
    clock = time.perf_counter_ns
    for offset, rec in enumerate(recs):
        t0 = clock()
        call(rec, start + offset)
        t1 = clock()
        samples.append(t1 - t0)
        while clock() - t1 < work_ns:
            pass


def percentile(sorted_ns: list[int], q: float) -> float:
    """Nearest-rank percentile, in microseconds."""
    index = min(len(sorted_ns) - 1, max(0, math.ceil(q / 100 * len(sorted_ns)) - 1))
    return sorted_ns[index] / 1000


def summarise(samples: list[int], round_medians: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "n": len(s),
        "median": percentile(s, 50),
        "p90": percentile(s, 90),
        "p99": percentile(s, 99),
        "mean": sum(s) / len(s) / 1000,
        "max": s[-1] / 1000,
        "round_lo": min(round_medians, default=float("nan")),
        "round_hi": max(round_medians, default=float("nan")),
    }


def median_us(samples: list[int]) -> float:
    return percentile(sorted(samples), 50)


def run_side_by_side(tmp: Path, n_records: int, rounds: int, warmup: int) -> dict[str, dict[str, float]]:
    plain = records(n_records + warmup)
    sb3 = [{f"train/{k}": v for k, v in rec.items()} for rec in plain]
    acme = [{**rec, "learner_steps": i} for i, rec in enumerate(plain)]
    systems: dict[str, tuple[System, list[dict]]] = {
        "bare capture (floor)": (bare_capture(tmp), plain),
        "rltrack, time 0.5 s": (rltrack_logger(tmp, 0.5), plain),
        "rltrack, time 1 ns (all written)": (rltrack_logger(tmp, 1e-9), plain),
        "SB3 csv+json+tensorboard": (sb3_logger(tmp), sb3),
        "Acme CSV, None+Time 0 s (all written)": (acme_logger(tmp, 0.0), acme),
        "Acme CSV, None+Time 0.5 s": (acme_logger(tmp, 0.5), acme),
    }
    for (call, settle, _), recs in systems.values():  # warm-up, untimed
        time_block(call, recs[:warmup], 0, [])
        settle()
    per_round = n_records // rounds
    samples: dict[str, list[int]] = {name: [] for name in systems}
    medians: dict[str, list[float]] = {name: [] for name in systems}
    names = list(systems)
    for r in range(rounds):
        start = warmup + r * per_round
        for name in names[r % len(names):] + names[: r % len(names)]:  # rotate the order each round
            (call, settle, _), recs = systems[name]
            block: list[int] = []
            gc.collect()
            time_block(call, recs[start:start + per_round], start, block)
            settle()
            samples[name] += block
            medians[name].append(median_us(block))
    for (_, _, close), _ in systems.values():
        close()
    return {name: summarise(samples[name], medians[name]) for name in names}


def count_lines(path: Path, state: dict[str, int]) -> int:
    """Newlines in a growing file, reading only what was appended since the last call."""
    if not path.exists():
        return 0
    with path.open("rb") as f:
        f.seek(state.get("offset", 0))
        chunk = f.read()
    state["offset"] = state.get("offset", 0) + len(chunk)
    state["lines"] = state.get("lines", 0) + chunk.count(b"\n")
    return state["lines"]


def run_burst(tmp: Path, n: int, timeout: float = 120.0) -> dict[str, float]:
    """N writes as fast as possible into a fresh logger (time filter 1 ns), then:
    when does the journal hold all N lines, and when does close() return."""
    logger = rltrack.make_logger(rltrack_config(str(tmp), "burst", 1e-9))
    journal = logger.run_dir / "journal.jsonl"
    recs = records(n)
    t0 = time.perf_counter()
    for i, rec in enumerate(recs):
        logger.write(rec, step=i, namespace="learner")
    t_burst = time.perf_counter()
    state: dict[str, int] = {}
    while count_lines(journal, state) < n and time.perf_counter() - t_burst < timeout:
        time.sleep(0.002)
    t_journal = time.perf_counter()
    lines_seen = state.get("lines", 0)
    logger.close()
    t_closed = time.perf_counter()
    return {
        "n": n,
        "burst_s": t_burst - t0,
        "journal_after_s": t_journal - t_burst if lines_seen >= n else float("inf"),
        "close_after_s": t_closed - t_burst,
        "background_rps": n / (t_journal - t0),
        "lines_after_close": count_lines(journal, state),
    }


def run_busy(tmp: Path, n: int, backlog: int) -> tuple[list[int], bool]:
    """Timed writes while the pipeline thread is busy draining a backlog.

    The timed blocks above last a few ms, less than the pipeline's idle wake-up
    (50 ms), so there the pipeline thread hardly runs and never competes for the
    GIL. In training it runs alongside: here 50 us of Python work separates the
    writes, so the block spans many GIL switch intervals (5 ms) while the
    pipeline works. Returns the samples and whether the pipeline was still
    behind (journal incomplete) when the last timed write returned."""
    logger = rltrack.make_logger(rltrack_config(str(tmp), "busy", 1e-9))
    recs = records(backlog + n)
    for i, rec in enumerate(recs[:backlog]):
        logger.write(rec, step=i, namespace="learner")
    time.sleep(0.1)  # past the pipeline's idle wait: it is now working through the backlog
    samples: list[int] = []
    gc.collect()
    time_block(lambda rec, i: logger.write(rec, step=i, namespace="learner"), recs[backlog:], backlog, samples,
               work_ns=50_000)
    still_behind = count_lines(logger.run_dir / "journal.jsonl", {}) < backlog + n
    logger.close()
    return samples, still_behind


def profile_burst(tmp: Path, n: int) -> None:
    """cProfile of the pipeline thread while it drains a burst: where background time goes."""
    from rltrack import pipeline

    profile = cProfile.Profile()
    original = pipeline.Logger._loop

    def profiled_loop(self: Any) -> None:  # bench-only wrapper around the pipeline thread's body
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()

    pipeline.Logger._loop = profiled_loop
    try:
        result = run_burst(tmp, n)
    finally:
        pipeline.Logger._loop = original
    print(f"burst of {n} under cProfile (slower than unprofiled): journal complete "
          f"{result['journal_after_s']:.2f} s, close() {result['close_after_s']:.2f} s after the burst\n")
    stats = pstats.Stats(profile)
    total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    by_file: dict[str, float] = {}
    for (filename, _, _), row in stats.stats.items():  # type: ignore[attr-defined]
        if filename == "~":
            short = "C builtins (file writes, json, csv, struct, ...)"
        else:
            short = filename.split("/rltrack/")[-1] if "/rltrack/" in filename else Path(filename).name
        by_file[short] = by_file.get(short, 0.0) + row[2]
    print(f"pipeline thread self time by file (total {total:.2f} s, {total / n * 1e6:.0f} us per record):")
    for short, tottime in sorted(by_file.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {tottime / total:6.1%}  {tottime / n * 1e6:7.1f} us/record  {short}")
    print()
    stats.sort_stats("tottime").print_stats(15)


# ---- reporting -------------------------------------------------------------

def ratio(x: float) -> str:
    return f"{x:,.0f}×" if x >= 10 else f"{x:.1f}×" if x >= 1 else f"{x:.2f}×"


def table(results: dict[str, dict[str, float]]) -> str:
    sb3 = results["SB3 csv+json+tensorboard"]["median"]
    acme = results["Acme CSV, None+Time 0 s (all written)"]["median"]
    lines = [
        "| system | median µs | p90 µs | p99 µs | mean µs | max µs | round medians µs | SB3 ÷ this | Acme ÷ this |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        rounds = "(one block)" if r["round_lo"] != r["round_lo"] else f"{r['round_lo']:.1f}–{r['round_hi']:.1f}"
        lines.append(
            f"| {name} | {r['median']:.1f} | {r['p90']:.1f} | {r['p99']:.1f} | {r['mean']:.1f} | {r['max']:,.0f} "
            f"| {rounds} | {ratio(sb3 / r['median'])} | {ratio(acme / r['median'])} |"
        )
    return "\n".join(lines)


def burst_lines(b: dict[str, float]) -> str:
    on_disk = b["journal_after_s"]
    return "\n".join([
        f"- burst of {b['n']:,} records written in {b['burst_s']:.3f} s on the calling thread"
        f" ({b['burst_s'] / b['n'] * 1e6:.1f} µs per record, wall)",
        f"- journal holds all {b['n']:,} lines **{on_disk:.2f} s** after the last write"
        f" (target ≤ {TARGET_ON_DISK_S:g} s)",
        f"- `close()` returns {b['close_after_s']:.2f} s after the last write"
        f" (journal lines after close: {b['lines_after_close']:,}, the extra ones are the aggregate's emission)",
        f"- pipeline throughput over the burst: {b['background_rps']:,.0f} records/s"
        f" → largest burst on disk within {TARGET_ON_DISK_S:g} s at this rate ≈"
        f" {b['background_rps'] * TARGET_ON_DISK_S:,.0f} records",
    ])


def verdict(results: dict[str, dict[str, float]], b: dict[str, float]) -> str:
    worst = max(r["median"] for name, r in results.items() if name.startswith("rltrack"))
    floor = results["bare capture (floor)"]["median"]
    sb3 = results["SB3 csv+json+tensorboard"]["median"]
    acme = results["Acme CSV, None+Time 0 s (all written)"]["median"]
    median_ok = worst <= TARGET_MEDIAN_US
    disk_ok = b["journal_after_s"] <= TARGET_ON_DISK_S
    return "\n".join([
        f"- calling-thread median: worst rltrack row {worst:.1f} µs → target ≤ {TARGET_MEDIAN_US:g} µs "
        f"**{'met' if median_ok else 'MISSED'}**; {worst / floor:.1f}× the bare-capture floor, "
        f"{sb3 / worst:.0f}× cheaper than SB3's logger, {acme / worst:.1f}× cheaper than Acme's CSV logger "
        "writing every record.",
        f"- but the pipeline thread shares the GIL with the caller: while it works, writes average "
        f"{results[BUSY]['mean']:.1f} µs (mean of the busy row, rare multi-ms GIL waits included), and the "
        f"{b['n']:,}-record burst took {b['burst_s'] / b['n'] * 1e6:.1f} µs of wall time per write.",
        f"- all records on disk within {TARGET_ON_DISK_S:g} s after a {b['n']:,}-record burst: "
        f"{b['journal_after_s']:.2f} s → **{'met' if disk_ok else 'MISSED'}**.",
    ])


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def machine(load_at_start: str) -> str:
    mem = "n/a"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    versions = []
    for module in ("stable_baselines3", "torch", "acme"):
        mod = sys.modules.get(module)
        version = getattr(mod, "__version__", None) if mod else None
        if version is None and module == "acme":
            from acme import _metadata
            version = _metadata.__version__
        versions.append(f"{module} {version}")
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "rltrack"],
                               capture_output=True, text=True, check=True).stdout.strip()
        commit += " + uncommitted changes in rltrack/" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return (f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), {mem} RAM, "
            f"load average {load_at_start} at start, {load_average()} at end; Python {platform.python_version()} on {platform.system()}; "
            f"rltrack {rltrack.__version__} at {commit}; {', '.join(versions)}")


def write_results(text: str) -> None:
    old = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n\n"
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        new = head + block + rest.split(END, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    RESULTS.write_text(new, encoding="utf-8")


def calls_table(results: dict[str, dict[str, float]]) -> str:
    """Markdown table of `summarise` results (the tracker benchmarks share it)."""
    lines = [
        "| system | records timed | median µs | p90 µs | p99 µs | max µs | round medians µs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['n']:,} | {r['median']:.1f} | {r['p90']:.1f} | {r['p99']:.1f} | {r['max']:,.0f} "
            f"| {r['round_lo']:.1f}–{r['round_hi']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=None, help="timed records per system (default 10000, quick 2000)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 5, quick 2)")
    parser.add_argument("--burst", type=int, default=None, help="records in the on-disk burst (default 20000, quick 5000)")
    parser.add_argument("--quick", action="store_true", help="CI-sized run")
    parser.add_argument("--write-results", action="store_true", help="rewrite the generated section of bench/RESULTS.md")
    parser.add_argument("--profile", action="store_true", help="only profile the pipeline thread during a burst")
    args = parser.parse_args()
    n_records = args.records or (2000 if args.quick else 10000)
    rounds = args.rounds or (2 if args.quick else 5)
    burst = args.burst or (5000 if args.quick else 20000)
    warmup = 200 if args.quick else 500
    backlog = 4000 if args.quick else 8000  # records queued before the busy block: keeps the pipeline working
    command = shlex.join(["python", os.path.relpath(__file__, REPO), *sys.argv[1:]])

    with tempfile.TemporaryDirectory(prefix="rltrack-bench-") as tmpdir:
        tmp = Path(tmpdir)
        if args.profile:
            profile_burst(tmp, burst)
            return
        load_at_start = load_average()
        started = time.perf_counter()
        results = run_side_by_side(tmp, n_records, rounds, warmup)
        busy_samples, still_behind = run_busy(tmp, n_records // rounds, backlog)
        results[BUSY] = summarise(busy_samples, [])
        b = run_burst(tmp, burst)
        elapsed = time.perf_counter() - started
    info = machine(load_at_start)  # after the run, so the versions of what was imported are known
    text = "\n".join([
        f"## bench_write: calling-thread cost of one 10-scalar record ({datetime.date.today().isoformat()})",
        "",
        f"Command: `{command}` (from the repository root; took {elapsed:.0f} s)  ",
        f"Machine: {info}  ",
        f"Samples: {n_records // rounds * rounds:,} timed writes per system in {rounds} alternating rounds,"
        f" after {warmup} warm-up writes; timer: `perf_counter_ns` around the call.",
        "",
        table(results),
        "",
        f"Note: the \"pipeline busy\" row times {n_records // rounds:,} writes, 50 µs of Python work apart, made while"
        f" the pipeline thread drains a backlog of {backlog:,} records (still behind at the last timed write:"
        f" {'yes' if still_behind else 'NO'}), so they compete with it for the GIL as in training; the other rows'"
        " blocks last a few ms, too short for the pipeline thread to wake up and compete.",
        "",
        "On-disk latency after a burst (rltrack, time filter 1 ns so every record reaches the journal):",
        "",
        burst_lines(b),
        "",
        "Verdict:",
        "",
        verdict(results, b),
    ])
    print(text)
    if args.write_results:
        write_results(text)
        print(f"\nwrote {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
