"""A Ray Tune sweep of N concurrent trials, with and without rltrack (issue 17).

Why this exists: with `RLTrackCallback` every trial of a sweep is an rltrack
run, and one agent per machine delivers them all. Issue 17 asks, for 64
concurrent trials on this 2-core machine, `["local", "mlflow", "wandb"]`,
MLflow on its default SQLite store (and again on a loopback `mlflow server`):

  * rltrack adds at most one process (its agent);
  * rltrack's extra RSS ≤ 400 MB (the agent's peak, with the processes it
    starts, plus the Tune driver's peak RSS above the same sweep's without it);
  * Tune's wall time ≤ 1.10× the same sweep without rltrack;
  * every value of every trial exactly once in MLflow (`MlflowClient`), in
    W&B's offline `.wandb` files (tests/helpers/wandb_reader.py) and in each run's
    `progress.csv`;

then how the cost grows with the number of trials (`--trials 16 64 256`).

The sweep: a real `tune.Tuner` over a function trainable, one trial per value
of a grid, each trial `tune.report`ing R results (default 200) of 10 metrics
`m0..m9` = `x * 10000 + i + k / 100`; `ray.init(num_cpus=C)` with C =
min(N, 64) by default (`--num-cpus`), one CPU per trial, so min(N, C) trials
run at once (256 trials: 64 at a time, in four waves). Tune's own logger
callbacks (CSV, JSON, TBX) stay on in both systems. rltrack: the callback with
`backends.use = ["local", "mlflow", "wandb"]`, W&B offline, MLflow on its
default SQLite store (`--mlflow sqlite`) or a loopback `mlflow server`
(`--mlflow server`, one server for the whole script), every other setting
its default (`run.close_timeout` 5 s, no filters).

Each sweep runs in a fresh Python process (so the driver's RSS of one system
does not carry into the other) with an agent directory of its own
(RLTRACK_AGENT_DIR in a temporary folder, so the agent starts cold, as on a
user's first sweep); the systems alternate, the order rotated each repetition and reversed every other one.
In that process, after `ray.init` and once Ray has stopped starting worker
processes (untimed):

  * timed: `tuner.fit()`, Tune's wall time: it includes what a user's script
    waits for at its end, the callback's wait (at most `close_timeout`) for
    the agent to deliver the trials' runs (the seconds Tune's driver thread
    spends in each of the callback's hooks are reported); the script would
    exit after `fit()` returns;
  * "until delivered": `fit()` plus the wait until the agent has delivered
    every run to every tracker (its registrations are gone): the agent goes on
    after the script, so this is when the trackers hold everything;
  * a thread samples every 0.5 s the driver's RSS, the processes running
    `rltrack.agent.process` for this agent directory, their RSS and their children's
    (wandb-core, which the W&B client starts), until delivered;
  * then (untimed) every value is read back from MLflow, the `.wandb` files
    and progress.csv, and counted: missing and duplicated values per store.

    python bench/bench_sweep.py                          # 64 trials, SQLite store, 3 repetitions
    python bench/bench_sweep.py --mlflow server          # the same on a loopback mlflow server
    python bench/bench_sweep.py --trials 16 64 256 --repetitions 1   # how the cost grows
    python bench/bench_sweep.py --quick                  # 8 trials of 50 results, 1 repetition
"""

from __future__ import annotations

import ast
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

import trackers
from report import Section, arguments, verdict
from timing import repeat_alternating

TARGET_RATIO, TARGET_RSS_MB, TARGET_PROCESSES = 1.10, 400.0, 1
BACKENDS = ["local", "mlflow", "wandb"]
METRICS = [f"m{k}" for k in range(10)]
SAMPLE_EVERY = 0.5
MB = 2**20
SYSTEMS = {"without": "Tune alone", "with": "Tune + RLTrackCallback (local, mlflow, wandb)"}


def value(x: int, i: int, k: int) -> float:
    return x * 10_000 + i + k / 100


# ---- one sweep, in a process of its own ----------------------------------------------


class Watch:
    """Samples the driver's RSS and this agent directory's agents (RSS, children, CPU) every SAMPLE_EVERY s.

    A process started by the agent (wandb-core, or any subprocess of a
    tracker client) bears the agent's command line from its fork until its
    exec, which on this loaded machine can take seconds: a process with the
    agent's command line whose parent has it too is counted as such a fork,
    not as an agent, and its RSS (pages shared with the agent) is left out."""

    def __init__(self, agent_dir: Path) -> None:
        self.signature = ["-m", "rltrack.agent.process", str(agent_dir)]
        self.me = psutil.Process()
        self.driver_peak = self.agent_peak = self.agent_tree_peak = self.agent_children = self.agents_at_once = self.forks_at_once = 0
        self.agent_seen: dict[int, list[float]] = {}  # pid: [first, last] sample, seconds after the watch started
        self.forks_seen: dict[int, list[float]] = {}
        self.started = time.perf_counter()
        self.agent_cpu: dict[int, float] = {}
        self.children_cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            self.sample()

    def sample(self) -> None:
        self.driver_peak = max(self.driver_peak, self.me.memory_info().rss)
        named = {p.pid: p for p in psutil.process_iter(["cmdline", "status", "ppid"])
                 if (p.info["cmdline"] or [])[-3:] == self.signature and p.info["status"] != psutil.STATUS_ZOMBIE}  # fmt: skip
        agents = [p for p in named.values() if p.info["ppid"] not in named]
        forks = [p for p in named.values() if p.info["ppid"] in named]
        self.agents_at_once = max(self.agents_at_once, len(agents))
        self.forks_at_once = max(self.forks_at_once, len(forks))
        now = round(time.perf_counter() - self.started, 1)
        for fork in forks:
            self.forks_seen.setdefault(fork.pid, [now, now])[1] = now
        rss = tree = 0
        for agent in agents:
            try:
                children = [child for child in agent.children(recursive=True) if child.pid not in named]
                rss += agent.memory_info().rss
                tree += sum(child.memory_info().rss for child in children)
                cpu = agent.cpu_times()
                self.agent_cpu[agent.pid] = cpu.user + cpu.system + cpu.children_user + cpu.children_system
                for child in children:  # wandb-core: its CPU while it runs (children_* counts it once reaped)
                    times = child.cpu_times()
                    self.children_cpu[child.pid] = times.user + times.system
                self.agent_children = max(self.agent_children, len(children))
            except psutil.Error:  # it ended meanwhile
                continue
            self.agent_seen.setdefault(agent.pid, [now, now])[1] = now
        self.agent_peak = max(self.agent_peak, rss)
        self.agent_tree_peak = max(self.agent_tree_peak, rss + tree)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def busy_cpu() -> float:
    """CPU seconds the whole machine has been busy (every process, all cores) since boot."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def process_cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def trainable(config: dict[str, Any]) -> None:
    from ray import tune

    for i in range(config["results"]):
        tune.report({key: value(config["x"], i, k) for k, key in enumerate(METRICS)})


def timed_callback(base: type) -> type:
    """`RLTrackCallback` timing the driver-thread seconds spent in its hooks (start, result, end: `close()` waits)."""

    class Timed(base):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.hook_seconds = {"start": 0.0, "result": 0.0, "end": 0.0, "experiment_end": 0.0}

        def _timed(self, hook: str, call: Any, *args: Any) -> None:
            t0 = time.perf_counter()
            call(*args)
            self.hook_seconds[hook] += time.perf_counter() - t0

        def log_trial_start(self, trial: Any) -> None:
            self._timed("start", super().log_trial_start, trial)

        def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
            self._timed("result", super().log_trial_result, iteration, trial, result)

        def log_trial_end(self, trial: Any, failed: bool = False) -> None:
            self._timed("end", super().log_trial_end, trial, failed)

        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            self._timed("experiment_end", lambda: super(Timed, self).on_experiment_end(trials, **info))

    return Timed


def start_ray(num_cpus: int) -> None:
    """`ray.init` of a new local cluster in this process (never one another
    process started; tried three times: Ray gives its raylet a fixed 30 s to
    register, which a loaded machine can miss), then waits until Ray has
    stopped starting worker processes, so that their start-up is not timed."""
    import ray

    for attempt in (1, 2, 3):
        try:
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
            break
        except Exception as exc:
            ray.shutdown()
            if attempt == 3 or "timed out during startup" not in str(exc):
                raise
    me, last, steady_since, deadline = psutil.Process(), -1, time.monotonic(), time.monotonic() + 180
    while time.monotonic() - steady_since < 5 and time.monotonic() < deadline:
        count = len(me.children(recursive=True))
        if count != last:
            last, steady_since = count, time.monotonic()
        time.sleep(0.5)


def sweep(system: str, work: Path, trials: int, results: int, num_cpus: int, mlflow_uri: str | None) -> dict[str, Any]:
    """One sweep of `system` ("with" or "without" rltrack): its timings, samples and read-back."""
    import ray
    from ray import tune

    from rltrack.agent.files import agent_dir, registrations

    trackers.isolate(work)
    start_ray(num_cpus)
    callbacks = []
    if system == "with":
        from rltrack.adapters.tune import RLTrackCallback

        settings: dict[str, Any] = {"use": BACKENDS, "wandb": {"project": "sweep"}}
        if mlflow_uri:
            settings["mlflow"] = {"tracking_uri": mlflow_uri}
        callbacks.append(timed_callback(RLTrackCallback)(run={"root": str(work / "runs")}, backends=settings))
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"x": tune.grid_search(list(range(trials))), "results": results},
        run_config=tune.RunConfig(name="sweep", storage_path=str(work / "ray_results"), callbacks=callbacks, verbose=0),
    )
    directory = agent_dir()
    watch = Watch(directory)
    t0, busy0, driver0 = time.perf_counter(), busy_cpu(), process_cpu(psutil.Process())
    errors = len(tuner.fit().errors)
    fit = time.perf_counter() - t0
    machine_cpu, driver_cpu = busy_cpu() - busy0, process_cpu(psutil.Process()) - driver0
    while system == "with" and registrations(directory):  # the agent delivers what close() left to it
        time.sleep(0.1)
    delivered = time.perf_counter() - t0
    watch.stop()
    ray.shutdown()
    hooks = callbacks[0].hook_seconds if callbacks else {}
    out = {"system": system, "fit": fit, "hook_s": hooks, "delivered": delivered, "errors": errors, "driver_peak_mb": watch.driver_peak / MB,
           "agents_at_once": watch.agents_at_once, "agents_seen": len(watch.agent_seen), "forks_at_once": watch.forks_at_once,
           "forks_seen": watch.forks_seen, "agent_children": watch.agent_children,
           "agent_peak_mb": watch.agent_peak / MB, "agent_tree_peak_mb": watch.agent_tree_peak / MB,
           "agent_cpu_s": sum(watch.agent_cpu.values()), "agent_children_cpu_s": sum(watch.children_cpu.values()),
           "machine_cpu_s": machine_cpu, "driver_cpu_s": driver_cpu, "agent_seen": watch.agent_seen}  # fmt: skip
    if system == "with":
        out["check"] = read_back(work / "runs" / "sweep", trials, results)
    for process in psutil.process_iter(["cmdline"]):  # this sweep's agent, idle by now: never left behind
        if (process.info["cmdline"] or [])[-3:] == watch.signature:
            process.kill()
    return out


# ---- read-back --------------------------------------------------------------------------


def compare(got: list[float], expected: list[float]) -> tuple[int, int]:
    """(missing, extra) values of `got` against `expected`, as multisets."""
    g, e = Counter(round(v, 6) for v in got), Counter(round(v, 6) for v in expected)
    return sum((e - g).values()), sum((g - e).values())


def read_back(group: Path, trials: int, results: int) -> dict[str, Any]:
    """Every value of every trial, counted in MLflow, the .wandb files and progress.csv."""
    import wandb_reader
    from mlflow_server import tracker

    counts = {store: {"values": 0, "missing": 0, "extra": 0} for store in ("mlflow", "wandb", "progress.csv")}
    run_dirs = sorted(path for path in group.iterdir() if path.is_dir())
    finished = 0
    for run_dir in run_dirs:
        x = ast.literal_eval((run_dir / "total_config.py").read_text())["hparams"]["x"]
        client, run_id = tracker(run_dir)
        finished += client.get_run(run_id).info.status == "FINISHED"
        rows = list(csv.DictReader((run_dir / "progress.csv").open()))
        wandb_rows = [row for f in wandb_reader.run_files(run_dir) for row in wandb_reader.history(f)]
        for k, key in enumerate(METRICS):
            expected = [value(x, i, k) for i in range(results)]
            found = {"mlflow": [m.value for m in client.get_metric_history(run_id, key)],
                     "wandb": [row[key] for row in wandb_rows if key in row],
                     "progress.csv": [float(row[key]) for row in rows if row.get(key) not in (None, "")]}  # fmt: skip
            for store, got in found.items():
                missing, extra = compare(got, expected)
                counts[store]["values"] += len(got)
                counts[store]["missing"] += missing
                counts[store]["extra"] += extra
    return {"runs": len(run_dirs), "mlflow_finished": finished, "expected": trials * results * len(METRICS), "stores": counts}


# ---- the side-by-side comparison ----------------------------------------------------------


def run_child(system: str, base: Path, trials: int, results: int, num_cpus: int, uri: str | None, index: int) -> dict[str, Any]:
    work = base / f"{trials}_{system}_{index}"
    work.mkdir(parents=True)
    env = {**os.environ, "RLTRACK_AGENT_DIR": str(work / "agents"), "RLTRACK_AGENT_IDLE": "5", "RAY_USAGE_STATS_ENABLED": "0"}
    command = [sys.executable, __file__, "--child", system, "--work", str(work), "--trials", str(trials), "--results", str(results),
               "--num-cpus", str(num_cpus), *(["--uri", uri] if uri else [])]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True, timeout=7200, check=False)
    if done.returncode != 0 or not (work / "result.json").is_file():
        raise RuntimeError(f"{system} sweep failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads((work / "result.json").read_text())


def compare_systems(base: Path, trials: int, results: int, num_cpus: int, uri: str | None, reps: int) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SYSTEMS}

    def one(system: str) -> float:
        out = run_child(system, base, trials, results, num_cpus, uri, len(runs[system]))
        runs[system].append(out)
        print(f"  {trials} trials, {system}: fit {out['fit']:.1f} s, delivered {out['delivered']:.1f} s", flush=True)
        return float(out["fit"])

    repeat_alternating({name: (lambda name=name: one(name)) for name in SYSTEMS}, reps)
    return runs


def med(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def spread(runs: list[dict[str, Any]], key: str, fmt: str = ".1f") -> str:
    values = [r[key] for r in runs]
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def figures(runs: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    alone, ours = runs["without"], runs["with"]
    driver_growth = med(ours, "driver_peak_mb") - med(alone, "driver_peak_mb")
    stores = Counter()  # type: ignore[var-annotated]
    for r in ours:
        for store, c in r["check"]["stores"].items():
            stores[f"{store} missing"] += c["missing"]
            stores[f"{store} extra"] += c["extra"]
    return {"ratio": med(ours, "fit") / med(alone, "fit"), "delivered_ratio": med(ours, "delivered") / med(alone, "fit"),
            "driver_growth": driver_growth, "extra_rss": med(ours, "agent_tree_peak_mb") + driver_growth,
            "agent_only_rss": med(ours, "agent_peak_mb") + driver_growth, "agents": max(r["agents_at_once"] for r in ours),
            "children": max(r["agent_children"] for r in ours), "forks": max(r.get("forks_at_once", 0) for r in ours), "errors": sum(r["errors"] for r in alone + ours),
            "wrong": sum(stores.values()), **stores}  # fmt: skip


def table(runs: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["| system | Tune wall s (`fit()`) | until delivered s | driver peak RSS MB | agents at once | agent peak RSS MB | agent + children MB | agent CPU s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for system, label in SYSTEMS.items():
        r = runs[system]
        agent = "—" if system == "without" else (f"{max(x['agents_at_once'] for x in r)} (+{max(x['agent_children'] for x in r)} child)"
                                                  + (f", forks {max(x.get('forks_at_once', 0) for x in r)}" if any(x.get("forks_at_once") for x in r) else ""))
        lines.append(f"| {label} | {spread(r, 'fit')} | {spread(r, 'delivered')} | {spread(r, 'driver_peak_mb', '.0f')} | {agent} "
                     f"| {spread(r, 'agent_peak_mb', '.0f')} | {spread(r, 'agent_tree_peak_mb', '.0f')} | {spread(r, 'agent_cpu_s')} |")  # fmt: skip
    return "\n".join(lines)


def cpu_table(runs: dict[str, list[dict[str, Any]]]) -> str:
    """Where the CPU went during `fit()`: on 2 cores a sweep keeps both busy, so
    every CPU-second rltrack's processes take is wall time Tune waits."""
    lines = ["CPU seconds during `fit()`, median (min–max): the whole machine (every process), Tune's driver, the agent, the agent's children (wandb-core).",
             "", "| system | machine CPU s | driver CPU s | agent CPU s | agent's children CPU s |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    for system, label in SYSTEMS.items():
        r = [x for x in runs[system] if "machine_cpu_s" in x]
        if r:
            lines.append(f"| {label} | {spread(r, 'machine_cpu_s')} | {spread(r, 'driver_cpu_s')} | {spread(r, 'agent_cpu_s')} | {spread(r, 'agent_children_cpu_s')} |")
    return "\n".join(lines)


def hooks_line(runs: list[dict[str, Any]]) -> str:
    parts = [f"{hook} {statistics.median(r['hook_s'].get(hook, 0.0) for r in runs):.1f} s" for hook in ("start", "result", "end", "experiment_end")]
    return ("Tune's driver thread inside RLTrackCallback's hooks, in all (median): " + ", ".join(parts)
            + " (`end`: the trials' `close()`; `experiment_end`: what the callback waits for at the end of `fit()`, "
            "at most close_timeout for the agent).")  # fmt: skip


def read_back_lines(runs: list[dict[str, Any]], trials: int) -> list[str]:
    out = []
    for i, r in enumerate(runs):
        for what, key in (("agent processes", "agent_seen"), ("forks of the agent before their exec", "forks_seen")):
            if len(r.get(key, {})) > (1 if key == "agent_seen" else 0):
                seen = ", ".join(f"pid {pid} from {a:.1f} s to {b:.1f} s" for pid, (a, b) in r[key].items())
                out.append(f"- repetition {i + 1}: {len(r[key])} {what} seen (sampled every {SAMPLE_EVERY} s after `fit()` began): {seen}")
        c = r["check"]
        stores = "; ".join(f"{store} {s['values']:,} values, {s['missing']} missing, {s['extra']} extra" for store, s in c["stores"].items())
        out.append(f"- repetition {i + 1}: {c['runs']} run directories of {trials} trials, {c['expected']:,} values expected per store: "
                   f"{stores}; MLflow runs FINISHED {c['mlflow_finished']}/{c['runs']}")  # fmt: skip
    return out


def main() -> None:
    parser = arguments(__doc__, "8 trials of 50 results, 1 repetition")
    parser.add_argument("--trials", type=int, nargs="+", default=[64], help="concurrent trials; several values give the growth table")
    parser.add_argument("--results", type=int, default=200, help="results per trial (10 metrics each)")
    parser.add_argument("--num-cpus", type=int, default=None, help="ray.init(num_cpus=...); default min(trials, 64)")
    parser.add_argument("--repetitions", type=int, default=3, help="sweeps per system, alternating")
    parser.add_argument("--mlflow", choices=["sqlite", "server"], default="sqlite", help="MLflow's default SQLite store or a loopback mlflow server")
    parser.add_argument("--child", choices=list(SYSTEMS), help=argparse_hidden())
    parser.add_argument("--work", type=Path, help=argparse_hidden())
    parser.add_argument("--uri", help=argparse_hidden())
    args = parser.parse_args()
    if args.child:
        out = sweep(args.child, args.work, args.trials[0], args.results, args.num_cpus, args.uri)
        (args.work / "result.json").write_text(json.dumps(out))
        return
    if args.quick:
        args.trials, args.results, args.repetitions = [8], 50, 1
    section = Section()
    rows: dict[int, tuple[int, dict[str, Any], dict[str, float]]] = {}
    out: list[str] = []
    summary: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rltrack-bench-sweep-") as tmp_name:
        tmp = Path(tmp_name)
        trackers.isolate(tmp)
        with trackers.mlflow_server(tmp / "mlflow_server", args.mlflow == "server") as uri:
            for n in args.trials:
                cpus = args.num_cpus or min(n, 64)
                runs = compare_systems(tmp, n, args.results, cpus, uri, args.repetitions)
                f = figures(runs)
                rows[n] = (cpus, runs, f)
                out += [f"### {n} trials, `ray.init(num_cpus={cpus})`: {min(n, cpus)} at once, {args.results} results × 10 metrics each", "",
                        table(runs), "", cpu_table(runs), "", hooks_line(runs["with"]), "", "After each sweep with rltrack (agents seen, values read back):", "", *read_back_lines(runs["with"], n), ""]  # fmt: skip
                store = "a loopback `mlflow server`" if uri else "the default SQLite store"
                summary += [
                    verdict(f"{n} trials, {store}: rltrack's processes (agents alive at once)", f"{f['agents']:.0f} (the agent's children: "
                            f"{f['children']:.0f}, wandb-core; forks of the agent before their exec, at once: {f['forks']:.0f})",
                            f"≤ {TARGET_PROCESSES}", f["agents"] <= TARGET_PROCESSES),
                    verdict(f"{n} trials, {store}: rltrack's extra RSS (agent + wandb-core peak + driver growth)",
                            f"{f['extra_rss']:.0f} MB (without wandb-core {f['agent_only_rss']:.0f} MB; driver {f['driver_growth']:+.0f} MB)",
                            f"≤ {TARGET_RSS_MB:.0f} MB", f["extra_rss"] <= TARGET_RSS_MB),
                    verdict(f"{n} trials, {store}: Tune's wall time with ÷ without rltrack", f"{f['ratio']:.3f}× (until delivered: "
                            f"{f['delivered_ratio']:.3f}×)", f"≤ {TARGET_RATIO:.2f}×", f["ratio"] <= TARGET_RATIO),
                    verdict(f"{n} trials, {store}: every value exactly once in MLflow, W&B, progress.csv",
                            f"{f['wrong']:.0f} missing or extra of {3 * n * args.results * len(METRICS) * args.repetitions:,}, "
                            f"{f['errors']:.0f} Tune trial errors", "0", f["wrong"] == 0 and f["errors"] == 0),
                ]  # fmt: skip
    import mlflow  # noqa: F401  (the section header names the versions the sweeps ran with)
    import ray  # noqa: F401
    import wandb  # noqa: F401

    if len(rows) > 1:
        out += ["### How the cost grows with the number of trials", "", growth(rows), ""]
    body = "\n".join([
        f"{args.repetitions} repetition(s) per system, alternating, each sweep in a fresh process with an agent directory of its own; "
        f"MLflow on {'a loopback `mlflow server`' if args.mlflow == 'server' else 'its default SQLite store'}, W&B offline. "
        "Timed: `tuner.fit()` (the callback waits up to close_timeout = 5 s for the agent); \"until delivered\": until the agent "
        "holds no registration. Median (min–max) over the repetitions; RSS peaks sampled every 0.5 s.",
        "", *out, "Verdict:", "", *summary])  # fmt: skip
    section.finish(f"bench_sweep: a Tune sweep of {', '.join(map(str, args.trials))} trials, with and without rltrack", body, write=not args.no_write)


def growth(rows: dict[int, tuple[int, dict[str, Any], dict[str, float]]]) -> str:
    lines = ["| trials | num_cpus | Tune alone s | with rltrack s | ratio | extra s per trial | until delivered s | agent CPU s per trial | extra RSS MB | extra RSS MB per trial |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for n, (cpus, runs, f) in rows.items():
        alone, ours = med(runs["without"], "fit"), med(runs["with"], "fit")
        lines.append(f"| {n} | {cpus} | {alone:.1f} | {ours:.1f} | {f['ratio']:.3f}× | {(ours - alone) / n:.2f} | {med(runs['with'], 'delivered'):.1f} "
                     f"| {med(runs['with'], 'agent_cpu_s') / n:.2f} | {f['extra_rss']:.0f} | {f['extra_rss'] / n:.1f} |")  # fmt: skip
    return "\n".join(lines)


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
