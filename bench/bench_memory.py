"""Memory while a tracker is down: RSS as 1M records are logged with MLflow unreachable.

Why this exists: rltrack's promise is that a tracker outage only makes its
cursor lag, because the backlog is the journal on disk, not a queue in memory.
Issue 6 asks for RSS growth ≤ 100 MB over a 1M-record backlog.

The logger has backends {local, mlflow}, MLflow pointed at a closed loopback
port (a port bound and released again: nothing listens there, so every
delivery attempt is refused and retried with backoff), the four filters on.
A sampler thread reads the RSS (psutil) of this process and of its children
every 50 ms: the bench's own delivery agent (its child, see
`trackers.isolate`) runs the local files and the MLflow client, so the
backlog's memory, if any, would be there (shared pages are counted in both,
so the sum errs high).

  * paced - N records in blocks of 10,000, each block followed by `flush()`:
            what a training loop slower than the pipeline thread sees. The
            target applies here: the growth is what the MLflow backlog costs.
  * burst - M records written as fast as possible, no flush: the writes
            outrun the pipeline thread, so the hand-off queue holds the
            difference; reported as MB per queued record, not judged by the target.

After each run: RSS growth (peak and at the end, over the RSS measured after
the logger's set-up and 1,000 warm-up records), the journal's size, and the
bytes MLflow has not received (its pending backlog, which must be all of it).

    python bench/bench_memory.py            # 1M paced + 200k burst, several minutes
    python bench/bench_memory.py --quick    # 100k paced + 20k burst
"""

from __future__ import annotations

import gc
import socket
import tempfile
import threading
import time
from pathlib import Path

import psutil

import trackers
from report import Section, arguments, verdict
from timing import records

from rltrack.delivery.cursor import pending_bytes

TARGET_MB = 100.0
BLOCK = 10_000
SETTLE = 10.0
MB = 2**20


def closed_port() -> int:
    """A loopback port nothing listens on: bound to find it free, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RssSampler:
    """The RSS of this process and its children every `interval` seconds, in a
    daemon thread; `peak` in bytes."""

    def __init__(self, interval: float = 0.05) -> None:
        self.process = psutil.Process()
        self.peak = self.rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def rss(self) -> int:
        total = self.process.memory_info().rss
        for child in self.process.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:  # it ended meanwhile
                continue
        return total

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.peak = max(self.peak, self.rss())

    def now(self) -> int:
        rss = self.rss()
        self.peak = max(self.peak, rss)
        return rss

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run(root: Path, name: str, n: int, paced: bool, uri: str) -> dict[str, float]:
    log = trackers.make_logger(root, name, ["local", "mlflow"], uri)
    block = records(BLOCK)
    for i, rec in enumerate(block[:1000]):
        log.write(rec, step=i, namespace="learner")
    log.flush()
    time.sleep(SETTLE)  # the agent has imported the MLflow client and failed its first attempts
    gc.collect()
    sampler = RssSampler()
    base = sampler.now()
    sampler.peak = base
    start = time.perf_counter()
    tenth = base
    for first in range(1000, n + 1000, BLOCK):
        for i, rec in enumerate(block[: min(BLOCK, n + 1000 - first)]):
            log.write(rec, step=first + i, namespace="learner")
        if paced:
            log.flush()
        if first - 1000 < n // 10 <= first - 1000 + BLOCK:
            tenth = sampler.now()
    log.flush()
    elapsed = time.perf_counter() - start
    end = sampler.now()
    sampler.stop()
    journal = (log.run_dir / "journal.jsonl").stat().st_size
    pending = pending_bytes(log.run_dir, "mlflow")
    lines = trackers.journal_count(log.run_dir, "learner")
    log.close(timeout=5)
    if lines != n + 1000:
        raise RuntimeError(f"{log.run_dir}: journal holds {lines} records, wrote {n + 1000}")
    return {"n": n, "seconds": elapsed, "peak_mb": (sampler.peak - base) / MB, "end_mb": (end - base) / MB, "late_mb": (end - tenth) / MB,
            "base_mb": base / MB, "journal_mb": journal / MB, "pending_mb": pending / MB}  # fmt: skip


def main() -> None:
    parser = arguments(__doc__, "100k paced records, 20k burst")
    parser.add_argument("--records", type=int, default=None, help="paced records (default 1,000,000, quick 100,000)")
    parser.add_argument("--burst", type=int, default=None, help="burst records (default 200,000, quick 20,000)")
    args = parser.parse_args()
    n = args.records or (100_000 if args.quick else 1_000_000)
    burst = args.burst or (20_000 if args.quick else 200_000)
    section = Section()
    uri = f"http://127.0.0.1:{closed_port()}"
    with tempfile.TemporaryDirectory(prefix="rltrack-bench-memory-") as tmp_name:
        tmp = Path(tmp_name)
        trackers.isolate(tmp)
        paced = run(tmp, "paced", n, True, uri)
        fast = run(tmp, "burst", burst, False, uri)
    lines = ["| run | records | seconds | RSS at start MB | peak growth MB | growth at end MB | growth over the last 90% MB | journal MB | MLflow pending MB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for label, r in (("paced (flush every 10k)", paced), ("burst (no flush)", fast)):
        lines.append(f"| {label} | {r['n']:,} | {r['seconds']:.0f} | {r['base_mb']:.0f} | {r['peak_mb']:.1f} | {r['end_mb']:.1f} "
                     f"| {r['late_mb']:.1f} | {r['journal_mb']:.0f} | {r['pending_mb']:.0f} |")  # fmt: skip
    body = "\n".join([
        f"Backends {{local, mlflow}}, MLflow at {uri} (nothing listens: every delivery is refused and retried); four filters; "
        f"RSS of the training process plus its children (the delivery agent: local files and MLflow client) sampled every 50 ms with psutil. "
        f"Growth is over the RSS after set-up, 1,000 warm-up records and {SETTLE:g} s "
        "(the agent has imported the MLflow client and been refused); \"the last 90%\" is from the block that reached 10% of the records to the end.",
        "",
        *lines,
        "",
        verdict(f"RSS growth over a {n:,}-record MLflow backlog (paced)", f"{paced['peak_mb']:.1f} MB peak", f"≤ {TARGET_MB:g} MB", paced["peak_mb"] <= TARGET_MB),
        f"- burst: {fast['peak_mb'] * MB / fast['n'] / 1024:.2f} KiB of peak growth per record written without waiting "
        "(the hand-off queue between the training thread and the pipeline thread holds what the pipeline has not reached)",
    ])  # fmt: skip
    section.finish("bench_memory: RSS with the MLflow server down", body, write=not args.no_write)


if __name__ == "__main__":
    main()
