"""The pipeline thread under pressure: write cost while it is busy, and how soon a burst is on disk.

Why this exists: `bench_calls.py` times writes in short blocks, during which
rltrack's pipeline thread hardly competes for the GIL. This script measures
the two things that happen when it does work (issue 2: all records on disk
within 1 s after a burst), with the four filters and backends {local}:

  * busy  - writes timed one by one, 50 µs of pure-Python "training" apart,
            while the pipeline thread drains a backlog queued just before, so
            the two threads compete for the GIL as in training; against the
            same writes into a logger whose pipeline is idle;
  * burst - N records written as fast as possible into a fresh logger, then
            the time after the last write until the journal holds all N
            lines, and until `close()` returns; the pipeline's records/s.

`--profile` runs only the burst, with cProfile on the pipeline thread, and
prints where its time goes by file and by function.

    python bench/bench_write.py             # under a minute
    python bench/bench_write.py --quick     # CI-sized
    python bench/bench_write.py --profile   # where the pipeline thread's time goes
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

import trackers
from report import Section, arguments, verdict
from timing import percentile, records, summary

TARGET_ON_DISK_S = 1.0
WORK_NS = 50_000


def timed_writes(log: Any, recs: list[dict[str, float]], first_step: int) -> list[int]:
    """Each write timed; WORK_NS of untimed pure-Python spinning between writes
    stands in for a training step (it holds the GIL, as Python training code does)."""
    clock = time.perf_counter_ns
    write = log.write
    samples = []
    for offset, rec in enumerate(recs):
        t0 = clock()
        write(rec, step=first_step + offset, namespace="learner")
        t1 = clock()
        samples.append(t1 - t0)
        while clock() - t1 < WORK_NS:
            pass
    return samples


def busy_and_idle(root: Path, n: int, backlog: int) -> tuple[dict[str, float], dict[str, float], bool]:
    """(summary while the pipeline drains `backlog`, summary with it idle,
    whether the pipeline was still behind when the last busy write returned)."""
    recs = records(backlog + n)
    busy_log = trackers.make_logger(root, "busy", trackers.LOCAL)
    for i, rec in enumerate(recs[:backlog]):
        busy_log.write(rec, step=i, namespace="learner")
    time.sleep(0.1)  # past the pipeline's idle wait: it is now working through the backlog
    gc.collect()
    busy = timed_writes(busy_log, recs[backlog:], backlog)
    behind = trackers.journal_count(busy_log.run_dir, "learner") < backlog + n
    busy_log.close()
    idle_log = trackers.make_logger(root, "idle", trackers.LOCAL)
    idle = []
    for block in range(0, n, 100):  # blocks of 100, each drained before the next: the pipeline never runs during one
        idle_log.flush()
        gc.collect()
        idle += timed_writes(idle_log, recs[block : block + 100], block)
    idle_log.close()
    return summary(busy, [percentile(sorted(busy), 50)]), summary(idle, [percentile(sorted(idle), 50)]), behind


def burst(root: Path, n: int, name: str = "burst") -> dict[str, float]:
    """N writes as fast as possible into a fresh logger: when is the journal complete, when does close() return."""
    log = trackers.make_logger(root, name, trackers.LOCAL)
    journal = log.run_dir / "journal.jsonl"
    recs = records(n)
    t0 = time.perf_counter()
    for i, rec in enumerate(recs):
        log.write(rec, step=i, namespace="learner")
    t_written = time.perf_counter()
    lines, offset = 0, 0
    while lines < n and time.perf_counter() - t_written < 300:
        with journal.open("rb") as f:  # only what was appended since the last look
            f.seek(offset)
            chunk = f.read()
        offset += len(chunk)
        lines += chunk.count(b"\n")
        time.sleep(0.002)
    t_journal = time.perf_counter()
    log.close()
    t_closed = time.perf_counter()
    return {"n": n, "write_s": t_written - t0, "journal_after_s": t_journal - t_written if lines >= n else float("inf"),
            "close_after_s": t_closed - t_written, "rps": n / (t_journal - t0)}  # fmt: skip


def profile(root: Path, n: int) -> None:
    """cProfile of the pipeline thread while it drains a burst."""
    from rltrack.core.turns import Turns

    prof = cProfile.Profile()
    original = Turns.run

    def profiled_loop(self: Any) -> None:  # bench-only wrapper around the pipeline thread's body
        prof.enable()
        try:
            original(self)
        finally:
            prof.disable()

    Turns.run = profiled_loop  # type: ignore[method-assign]
    try:
        result = burst(root, n, "profiled")
    finally:
        Turns.run = original  # type: ignore[method-assign]
    stats = pstats.Stats(prof)
    total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    by_file: dict[str, float] = {}
    for (filename, _, _), row in stats.stats.items():  # type: ignore[attr-defined]
        short = "C builtins (file writes, json, csv, struct, ...)" if filename == "~" else filename.split("/rltrack/")[-1] if "/rltrack/" in filename else Path(filename).name
        by_file[short] = by_file.get(short, 0.0) + row[2]
    print(f"burst of {n:,} under cProfile (slower than unprofiled): journal complete {result['journal_after_s']:.2f} s after the last write\n")
    print(f"pipeline thread self time by file (total {total:.2f} s, {total / n * 1e6:.0f} µs per record):")
    for short, tottime in sorted(by_file.items(), key=lambda kv: -kv[1])[:14]:
        print(f"  {tottime / total:6.1%}  {tottime / n * 1e6:7.1f} µs/record  {short}")
    print()
    stats.sort_stats("tottime").print_stats(20)


def main() -> None:
    parser = arguments(__doc__, "a 5,000-record burst, 1,000 busy writes")
    parser.add_argument("--burst", type=int, default=None, help="records in the burst (default 20000, quick 5000)")
    parser.add_argument("--profile", action="store_true", help="only profile the pipeline thread during a burst")
    args = parser.parse_args()
    n_burst = args.burst or (5_000 if args.quick else 20_000)
    n_busy, backlog = (1_000, 4_000) if args.quick else (2_000, 8_000)
    with tempfile.TemporaryDirectory(prefix="rltrack-bench-write-") as tmp_name:
        tmp = Path(tmp_name)
        if args.profile:
            profile(tmp, n_burst)
            return
        section = Section()
        busy, idle, behind = busy_and_idle(tmp, n_busy, backlog)
        b = burst(tmp, n_burst)
    rows = ["| writes | n | median µs | p90 µs | p99 µs | mean µs |", "|---|---:|---:|---:|---:|---:|"]
    for label, r in ((f"pipeline busy draining {backlog:,} records (still behind at the last write: {'yes' if behind else 'NO'})", busy),
                     ("pipeline idle (blocks of 100, drained between blocks)", idle)):  # fmt: skip
        rows.append(f"| {label} | {r['n']:,} | {r['median']:.1f} | {r['p90']:.1f} | {r['p99']:.1f} | {r['mean']:.1f} |")
    body = "\n".join([
        f"Four filters, backends {{local}}; writes {WORK_NS // 1000} µs of pure-Python work apart.",
        "",
        *rows,
        "",
        f"Burst: {b['n']:,} records written in {b['write_s']:.2f} s ({b['write_s'] / b['n'] * 1e6:.1f} µs a write, wall); "
        f"journal complete {b['journal_after_s']:.2f} s after the last write; `close()` returned {b['close_after_s']:.2f} s after it; "
        f"pipeline {b['rps']:,.0f} records/s.",
        "",
        verdict(f"{b['n']:,}-record burst on disk after the last write", f"{b['journal_after_s']:.2f} s", f"≤ {TARGET_ON_DISK_S:g} s",
                b["journal_after_s"] <= TARGET_ON_DISK_S),
        f"- GIL sharing: busy writes cost {busy['mean'] / idle['mean']:.1f}× idle ones on average (mean {busy['mean']:.1f} vs {idle['mean']:.1f} µs).",
    ])  # fmt: skip
    section.finish("bench_write: writes under a busy pipeline, burst on disk", body, write=not args.no_write)


if __name__ == "__main__":
    main()
