"""Issue 42 item 5: live under full load. While a training loop keeps both
cores busy beside busy loops at normal priority, how long after it is
written is a value in MLflow's store, W&B's offline run file and trackio's
store, and how much of its speed does the training lose to rltrack?

One process is the training: the stress loop of bench_training.py (~200 µs
of numpy a step), beside `--loops` busy loops (`while 1: pass`, niceness 0,
in this session as training's own workers would be). Three variants
alternate (in turn forwards and backwards), `--repetitions` times, each for
`--seconds`:

* bare: the loop alone; its speed is the reference.
* rltrack: the same loop writing 10 scalars every `--every` steps
  (`Logger.write`, no filters) into local + MLflow (its default SQLite
  store) + W&B offline + trackio, with a cold agent (the agent of the
  previous round exited). Nothing else runs: the slowdown is judged here.
* watched: the same as rltrack, with a watcher process (niceness 0, a poll
  every `POLL` s) that reads how far each store holds the run: MLflow's
  `metrics` table, the rows of the `.wandb` file
  (rltrack.trackers.wandb.files.HistoryFile, the count W&B's own reader
  gives), trackio's `metrics` table. Values arrive in the order written, so a
  value written at t (step s) is in a store at the first poll that sees step
  s there; its delay is that poll's time less t. The watcher is the bench's,
  not rltrack's (~1-2% of a core, its start ~0.5 s), and in the bare rounds
  nothing like it runs: so its rounds give the delays, not the slowdown.

After the loop `close()` waits until every tracker has everything; then every
store is read back with its own reader (MlflowClient, the test suite's
.wandb and trackio readers) and the values compared.

The agent's CPU (with its children: wandb-core) during the loop is read
from /proc, as is the training thread's (schedstat). The slowdown is judged
on the loop's steps per CPU-second of the group (training, busy loops,
agent: see the report's note); the report splits it into the training
thread's share of the group's CPU and its steps per CPU-second of its own,
and shows the wall-time ratio beside it.

    python bench/bench_freshness.py               # 2 x 3 rounds of 180 s, about 20 minutes on a quiet machine
    python bench/bench_freshness.py --quick       # 1 x 3 rounds of 40 s
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

import trackers
from bench_training import Work
from rltrack.agent.files import agent_dir
from report import Section, arguments, verdict
from timing import KEYS

TARGET_MEDIAN, TARGET_P99, TARGET_SLOWDOWN = 10.0, 60.0, 1.03
POLL = 0.5
STORES = ("mlflow", "wandb", "trackio")
BACKENDS = ["local", "mlflow", "wandb", "trackio"]
LAST_KEY = f"learner/{KEYS[-1]}"


# ---- the watcher (a process of its own: `--watch ROOT RUN_DIR OUT`) -----------------------


def _max_step(database: Path, query: str, *args: Any) -> int:
    if not database.is_file():
        return -1
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=0.2) as db:
            row = db.execute(query, args).fetchone()
    except sqlite3.Error:  # being made, or locked for longer than the timeout: seen at the next poll
        return -1
    return -1 if row is None or row[0] is None else int(row[0])


def watch(root: Path, run_dir: Path, out: Path) -> None:
    """Polls every store until SIGTERM; writes [(time, {store: highest step held})] to `out`."""
    from rltrack.trackers.wandb.files import HistoryFile

    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))
    history: HistoryFile | None = None
    seen: list[tuple[float, dict[str, int]]] = []
    while not stopped:
        now = time.time()
        if history is None:
            found = sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
            history = HistoryFile(found[0]) if found else None
        try:
            rows = history.count() if history is not None else 0
        except OSError:
            rows = 0
        trackio = next(iter(sorted((root / "trackio").glob("*.db"))), None)
        seen.append((now, {
            "mlflow": _max_step(root / "mlflow.db", "SELECT max(step) FROM metrics WHERE key = ?", LAST_KEY),
            "wandb": rows - 1,  # rows are written in step order from step 0
            "trackio": _max_step(trackio, "SELECT max(step) FROM metrics") if trackio else -1,
        }))  # fmt: skip
        time.sleep(max(0.0, POLL - (time.time() - now)))
    out.write_text(json.dumps(seen))


# ---- the training -------------------------------------------------------------------------


def agent_tree_cpu(agents: Path) -> float:
    """CPU seconds of the agent serving `agents` and its children (wandb-core), 0 when none runs."""
    try:
        pid = json.loads((agents / "agent.json").read_text())["pid"]
        agent = psutil.Process(pid)
        procs = [agent, *agent.children(recursive=True)]
    except (OSError, KeyError, ValueError, psutil.Error):
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def wait_agent_gone(agents: Path, bound: float = 120.0) -> None:
    """Until the previous round's agent has exited (idle), so every rltrack round starts a cold one and no round shares the CPU with it."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        try:
            pid = json.loads((agents / "agent.json").read_text())["pid"]
            if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except (OSError, KeyError, ValueError, psutil.Error):
            return
        time.sleep(0.5)
    print(f"the agent of {agents} still runs after {bound:.0f} s", file=sys.stderr)


def cpu_of(pids: list[int]) -> float:
    """CPU seconds (user + system) of `pids` (this process's whole, threads included)."""
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def thread_times() -> tuple[float, float]:
    """Seconds the calling thread has run and has waited, runnable, for a CPU
    (Linux's schedstat; elsewhere its process's CPU, and no wait)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            ran, waited = f.read().split()[:2]
        return int(ran) / 1e9, int(waited) / 1e9
    except (OSError, ValueError):
        return time.process_time(), 0.0


class Round:
    """The loop's steps, wall time and CPU of a round: the group's (this
    process, the busy loops and `agents`' agent with wandb-core) and the
    training thread's own: the time it ran, waited for a CPU, and neither
    (blocked: on the GIL while rltrack's pipeline thread held it, or on I/O)."""

    def __init__(self, loops: list[int], agents: Path | None) -> None:
        self.loops, self.agents = loops, agents
        self.cpu, self.thread = cpu_of([os.getpid(), *loops]), thread_times()
        self.start = time.perf_counter()

    def end(self, steps: int) -> dict[str, Any]:
        loop_s = time.perf_counter() - self.start
        ran, waited = (now - before for now, before in zip(thread_times(), self.thread))
        agent = agent_tree_cpu(self.agents) if self.agents else 0.0  # a cold agent, started by make_logger: its CPU until the loop's end
        group = cpu_of([os.getpid(), *self.loops]) - self.cpu + agent
        return {"steps_per_s": steps / loop_s, "steps_per_cpu_s": steps / group, "share": ran / group, "steps_per_thread_cpu_s": steps / ran,
                "waited": waited, "blocked": max(0.0, loop_s - ran - waited), "agent_cpu": agent, "group_cpu": group, "loop_s": loop_s,
                "load": os.getloadavg()[0]}  # fmt: skip


def bare(work: Work, seconds: float, loops: list[int]) -> dict[str, Any]:
    steps, end = 0, time.perf_counter() + seconds
    measured = Round(loops, None)
    while time.perf_counter() < end:
        work()
        steps += 1
    return measured.end(steps)


def with_rltrack(work: Work, seconds: float, every: int, tmp: Path, index: int, loops: list[int], watched: bool) -> dict[str, Any]:
    root = tmp / f"root{index}"
    log = trackers.make_logger(root, "fresh", BACKENDS, filters=False)
    out = tmp / f"watch{index}.json"
    watcher = subprocess.Popen([sys.executable, __file__, "--watch", str(root), str(log.run_dir), str(out)]) if watched else None
    agents = agent_dir()
    written: list[float] = []
    steps = 0
    measured = Round(loops, agents)
    end = measured.start + seconds
    while time.perf_counter() < end:
        values = work()
        if steps % every == 0:
            written.append(time.time())
            log.write(values, step=len(written) - 1, namespace="learner")
        steps += 1
    result = measured.end(steps)
    watcher_cpu = cpu_of([watcher.pid]) if watcher is not None else None
    t0 = time.perf_counter()
    closed = log.close(timeout=600)
    close_s = time.perf_counter() - t0
    agent_total = agent_tree_cpu(agents)  # until every tracker had everything (the agent idles a few seconds before it exits)
    seen = None
    if watcher is not None:
        time.sleep(2 * POLL)  # the watcher's last polls see what close() waited for
        watcher.send_signal(signal.SIGTERM)
        watcher.wait(60)
        seen = json.loads(out.read_text())
    return {**result, "rows": len(written), "delays": delays(written, seen) if seen is not None else None, "closed": closed, "close_s": close_s,
            "agent_total": agent_total, "watcher_cpu": watcher_cpu, "readback": read_back(root, log.run_dir, len(written))}  # fmt: skip


def delays(written: list[float], seen: list[tuple[float, dict[str, int]]]) -> dict[str, list[float]]:
    """Per store, each value's delay: the first poll holding its step less its write time (inf: never seen)."""
    out: dict[str, list[float]] = {}
    for store in STORES:
        result, at = [], 0
        for step, t in enumerate(written):
            while at < len(seen) and seen[at][1][store] < step:
                at += 1
            result.append(seen[at][0] - t if at < len(seen) else float("inf"))
        out[store] = result
    return out


def read_back(root: Path, run_dir: Path, rows: int) -> dict[str, int]:
    """Each store's count of the last key's values, read with its own reader."""
    from mlflow import MlflowClient

    import trackio_reader
    import wandb_reader

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    history = [row for path in wandb_reader.run_files(run_dir) for row in wandb_reader.history(path)]
    project = trackio_reader.projects(root / "trackio")[0]
    logs = next(iter(trackio_reader.store(root / "trackio", project)["logs"].values()))
    return {
        "mlflow": len(client.get_metric_history(run.info.run_id, LAST_KEY)),
        "wandb": sum(1 for row in history if LAST_KEY in row),
        "trackio": sum(1 for row in logs if LAST_KEY in row),
        "mlflow_status_finished": int(run.info.status == "FINISHED"),
    }


# ---- report ---------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


VARIANTS = ("bare", "rltrack", "watched")


def main() -> None:
    parser = arguments(__doc__, "1 repetition of 40 s a variant")
    parser.add_argument("--seconds", type=float, default=None, help="a round's loop (default 180, quick 40)")
    parser.add_argument("--repetitions", type=int, default=None, help="default 2, quick 1")
    parser.add_argument("--loops", type=int, default=2, help="busy loops beside the training (default 2)")
    parser.add_argument("--every", type=int, default=250, help="a 10-scalar record every this many steps (default 250)")
    args = parser.parse_args()
    seconds = args.seconds or (40.0 if args.quick else 180.0)
    reps = args.repetitions or (1 if args.quick else 2)
    section = Section()
    loops = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.loops)]
    try:
        with tempfile.TemporaryDirectory(prefix="rltrack-bench-fresh-") as tmp_name:
            tmp = Path(tmp_name)
            trackers.isolate(tmp)
            os.environ["RLTRACK_AGENT_IDLE"] = "5"
            work = Work(200.0)
            results: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
            for r in range(reps):
                for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                    wait_agent_gone(agent_dir())
                    pids = [loop.pid for loop in loops]
                    index = sum(len(done) for done in results.values())
                    result = bare(work, seconds, pids) if variant == "bare" else with_rltrack(work, seconds, args.every, tmp, index, pids, variant == "watched")
                    if any(loop.poll() is not None for loop in loops):  # another session's `pkill -f "while 1"` did this once
                        raise SystemExit(f"a busy loop ended during the {variant} round (killed from outside?): the rounds are not comparable")
                    results[variant].append(result)
                    print(variant, {k: v for k, v in result.items() if k != "delays"}, flush=True)
    finally:
        for loop in loops:
            loop.kill()
    body = report(results, work, seconds, args)
    section.finish(f"bench_freshness: values in every tracker while training keeps the cores busy ({args.loops} busy loops)", body, write=not args.no_write)


def ratio(results: dict[str, list[dict[str, Any]]], variant: str, key: str) -> float:
    """The median over the bare rounds of `key` ÷ its median over `variant`'s rounds."""
    return statistics.median(r[key] for r in results["bare"]) / statistics.median(r[key] for r in results[variant])


def report(results: dict[str, list[dict[str, Any]]], work: Work, seconds: float, args: Any) -> str:
    ours, watched = results["rltrack"], results["watched"]
    slowdown = ratio(results, "rltrack", "steps_per_cpu_s")
    lines = [f"The stress loop ({work.per_step_us:.0f} µs of numpy a step) for {seconds:.0f} s a round beside {args.loops} busy loops (niceness 0), "
             f"{len(ours)} round(s) of each variant, alternating; with rltrack a 10-scalar record every {args.every} steps into local, MLflow (SQLite), "
             f"W&B (offline) and trackio, a cold agent each round. The slowdown is judged on the rltrack rounds, where nothing but the training, the busy "
             f"loops and rltrack runs; the delays on the watched rounds, where the bench's watcher (not counted in the group) polls the stores every {POLL} s. "
             "Delay: from `write()` to the first poll that finds the value in the store.", "",
             "Steps per CPU-second of the group: the loop's steps over the CPU the training process, the busy loops and (with rltrack) the agent "
             "and wandb-core used meanwhile. Within their session (autogroup) they share by niceness, so this ratio is what rltrack costs the "
             "training, and equals the wall-time ratio on a machine with nothing else to run. Other sessions' load still moves it two ways: the "
             "session gets less CPU while the agent needs the same (its share of the group grows), and a CPU-second does less work (the "
             "training thread's steps per CPU-second of its own). So the table splits it: steps per CPU-second of the group = the training "
             "thread's share of the group's CPU × its steps per CPU-second of its own.", "",
             "| round | load | steps/s | steps per CPU-s of the group | training thread's share of the group's CPU | its steps per CPU-s of its own | "
             "training thread waiting for a CPU / blocked s | records | agent + wandb-core CPU s in the loop (% of the group's) | close() s | " + " | ".join(f"{s} median / p99 / max s" for s in STORES) + " | read back (mlflow, wandb, trackio) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(STORES) + "---|"]  # fmt: skip
    all_delays: dict[str, list[float]] = {s: [] for s in STORES}
    for variant in VARIANTS:
        for i, r in enumerate(results[variant]):
            cells = [f"{variant} {i + 1}", f"{r['load']:.1f}", f"{r['steps_per_s']:,.0f}", f"{r['steps_per_cpu_s']:,.0f}", f"{r['share']:.3f}",
                     f"{r['steps_per_thread_cpu_s']:,.0f}", f"{r['waited']:.1f} / {r['blocked']:.2f}"]  # fmt: skip
            if variant == "bare":
                lines.append("| " + " | ".join(cells) + " |" + " |" * (4 + len(STORES)))
                continue
            cells += [f"{r['rows']:,}", f"{r['agent_cpu']:.1f} ({100 * r['agent_cpu'] / r['group_cpu']:.1f}%)", f"{r['close_s']:.1f}"]
            for s in STORES:
                if r["delays"] is None:
                    cells.append("")
                    continue
                d = r["delays"][s]
                all_delays[s] += d
                cells.append(f"{statistics.median(d):.1f} / {pct(d, 0.99):.1f} / {max(d):.1f}")
            rb = r["readback"]
            cells.append(f"{rb['mlflow']}, {rb['wandb']}, {rb['trackio']} of {r['rows']}; MLflow FINISHED: {bool(rb['mlflow_status_finished'])}")
            lines.append("| " + " | ".join(cells) + " |")
    worst_median = max(statistics.median(d) for d in all_delays.values())
    worst_p99 = max(pct(d, 0.99) for d in all_delays.values())
    complete = all(r["readback"][s] == r["rows"] for r in ours + watched for s in STORES)
    watcher = statistics.median(r["watcher_cpu"] / r["loop_s"] for r in watched)
    lines += ["", f"Without ÷ with rltrack (medians of rounds, so the parts' product is near the whole, not equal): steps per CPU-second of the group "
              f"{slowdown:.3f}×; the training thread's share {ratio(results, 'rltrack', 'share'):.3f}×, its steps per CPU-second of its own "
              f"{ratio(results, 'rltrack', 'steps_per_thread_cpu_s'):.3f}×; wall time "
              f"{ratio(results, 'rltrack', 'steps_per_s'):.3f}×. Watched rounds: {ratio(results, 'watched', 'steps_per_cpu_s'):.3f}× (wall "
              f"{ratio(results, 'watched', 'steps_per_s'):.3f}×), the watcher using {100 * watcher:.1f}% of a core.",
              "", "Verdict:", "",
              verdict("median delay until a value is in MLflow, W&B and trackio (the slowest store)", f"{worst_median:.1f} s", f"≤ {TARGET_MEDIAN:.0f} s", worst_median <= TARGET_MEDIAN),
              verdict("99th percentile of that delay", f"{worst_p99:.1f} s", f"≤ {TARGET_P99:.0f} s", worst_p99 <= TARGET_P99),
              verdict("the stress loop's steps per CPU-second of the group, without ÷ with rltrack, beside the same load", f"{slowdown:.3f}× (medians of rounds)", f"≤ {TARGET_SLOWDOWN:.2f}×", slowdown <= TARGET_SLOWDOWN),
              verdict("every value in every store once, read back", "yes" if complete else "NO", "all", complete)]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--watch"]:
        watch(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        main()
