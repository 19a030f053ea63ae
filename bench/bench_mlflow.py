"""What sending a run to MLflow costs with rltrack, next to calling MLflow directly.

Why this exists: issue 4 promises that a tracker never slows training (the
calling-thread cost of a 10-scalar record stays <= 10 us whatever the
backends) and that MLflow delivery from the journal, in `log_batch` requests,
is at least 20x faster in records/s than calling `mlflow.log_metrics` once
per record against the same store. Both figures are measured here, in one
process, against the same MLflow SQLite store (`<root>/mlflow.db`, rltrack's
embedded default), or with `--server` against a local `mlflow server`.

1. Calling-thread cost, systems alternating in rounds (as in bench_write.py):
   bare capture (floor); rltrack with backends [local], [mlflow] and
   [local, mlflow]; `mlflow.log_metrics(record, step=i)`. Each call is timed
   with perf_counter_ns; rltrack's background delivery keeps running during
   its own blocks (that contention is part of what users feel) and is let
   finish, untimed, before the next block.
2. End-to-end delivery: N records written to a fresh logger with backends
   [mlflow], timed until `close()` returns with MLflow holding everything
   (checked with get_metric_history), against M records sent one
   `mlflow.log_metrics` call each; and, as the ceiling for any batching
   client, the same N records as prepared `MlflowClient.log_batch` calls.

    python bench/bench_mlflow.py            # full run, a few minutes on a quiet machine
    python bench/bench_mlflow.py --quick    # CI-sized
    python bench/bench_mlflow.py --server   # against a local mlflow server instead of SQLite
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from bench_write import KEYS, REPO, calls_table, load_average, median_us, records, summarise, time_block

import rltrack  # from this checkout: bench_write puts the repository first on sys.path
from rltrack.delivery import pending_bytes

TARGET_CALL_US = 10.0
TARGET_SPEEDUP = 20.0

System = tuple[Callable[[dict, int], None], Callable[[], None], Callable[[], None]]


def logger(root: Path, name: str, backends: list[str], tracking_uri: str | None) -> rltrack.Logger:
    mlflow_settings = {"tracking_uri": tracking_uri} if tracking_uri else {}
    return rltrack.make_logger(
        {"run": {"root": str(root), "name": name}, "backends": {"use": backends, "mlflow": mlflow_settings}}
    )


def rltrack_system(root: Path, backends: list[str], tracking_uri: str | None) -> System:
    log = logger(root, "calls_" + "_".join(backends), backends, tracking_uri)
    write = log.write

    def settle() -> None:  # everything written so far in the journal and, for mlflow, delivered
        log.flush()
        while "mlflow" in backends and pending_bytes(log.run_dir, "mlflow"):
            time.sleep(0.05)

    return (lambda rec, i: write(rec, step=i, namespace="learner")), settle, log.close


def direct_system(tracking_uri: str, experiment: str) -> System:
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_experiment(experiment)
    mlflow.start_run()
    return (lambda rec, i: mlflow.log_metrics(rec, step=i)), (lambda: None), mlflow.end_run


def bare_system() -> System:
    captured: list[dict] = []
    return (lambda rec, i: captured.append(dict(rec))), captured.clear, captured.clear


def calling_thread(root: Path, uri: str, tracking_uri: str | None, per_round: int, direct_per_round: int, rounds: int) -> dict[str, dict[str, float]]:
    systems: dict[str, tuple[System, int]] = {
        "bare capture (floor)": (bare_system(), per_round),
        "rltrack, backends [local]": (rltrack_system(root, ["local"], tracking_uri), per_round),
        "rltrack, backends [mlflow]": (rltrack_system(root, ["mlflow"], tracking_uri), per_round),
        "rltrack, backends [local, mlflow]": (rltrack_system(root, ["local", "mlflow"], tracking_uri), per_round),
        "mlflow.log_metrics, one call per record": (direct_system(uri, "bench-direct-calls"), direct_per_round),
    }
    recs = records(per_round * rounds)
    samples: dict[str, list[int]] = {name: [] for name in systems}
    medians: dict[str, list[float]] = {name: [] for name in systems}
    for r in range(rounds):
        for name, ((call, settle, _), n) in systems.items():
            block: list[int] = []
            time_block(call, recs[r * n : (r + 1) * n], r * n, block)
            settle()
            samples[name] += block
            medians[name].append(median_us(block))
    for (_, _, close), _ in systems.values():
        close()
    return {name: summarise(samples[name], medians[name]) for name in systems}


def delivery_rltrack(root: Path, tracking_uri: str | None, n: int) -> dict[str, float]:
    """Records/s from the first write until close() returns with all delivered."""
    from mlflow import MlflowClient

    recs = records(n)
    log = logger(root, "delivery", ["mlflow"], tracking_uri)
    start = time.perf_counter()
    for i, rec in enumerate(recs):
        log.write(rec, step=i, namespace="learner")
    written = time.perf_counter()
    complete = log.close()
    elapsed = time.perf_counter() - start
    state = json.loads((log.run_dir / "cursors" / "mlflow_run.json").read_text())
    client = MlflowClient(state["tracking_uri"])
    held = min(len(client.get_metric_history(state["run_id"], f"learner/{key}")) for key in KEYS)
    if not complete or held != n:
        raise RuntimeError(f"MLflow holds {held} of {n} records per key (close() returned {complete})")
    return {"n": n, "seconds": elapsed, "write_seconds": written - start, "rps": n / elapsed}


def delivery_log_batch(uri: str, n: int) -> dict[str, float]:
    """The ceiling for any batching client: MlflowClient.log_batch with 1000
    metrics (100 records) per call, metrics built before timing."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("bench-log-batch")
    experiment_id = experiment.experiment_id if experiment else client.create_experiment("bench-log-batch")
    run_id = client.create_run(experiment_id).info.run_id
    now = int(time.time() * 1000)
    metrics = [Metric(f"learner/{k}", v, now + i, i) for i, rec in enumerate(records(n)) for k, v in rec.items()]
    start = time.perf_counter()
    for chunk in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[chunk : chunk + 1000])
    elapsed = time.perf_counter() - start
    client.set_terminated(run_id)
    return {"n": n, "seconds": elapsed, "rps": n / elapsed}


def delivery_direct(uri: str, m: int) -> dict[str, float]:
    call, _, close = direct_system(uri, "bench-direct-delivery")
    recs = records(m)
    start = time.perf_counter()
    for i, rec in enumerate(recs):
        call(rec, i)
    elapsed = time.perf_counter() - start
    close()
    return {"n": m, "seconds": elapsed, "rps": m / elapsed}


def delivery_table(paths: dict[str, dict[str, float]], direct: dict[str, float]) -> str:
    lines = ["| path | records | seconds | records/s | × per-record log_metrics |", "|---|---:|---:|---:|---:|"]
    for name, r in paths.items():
        lines.append(f"| {name} | {r['n']:,} | {r['seconds']:.1f} | {r['rps']:,.0f} | {r['rps'] / direct['rps']:.1f}× |")
    return "\n".join(lines)


def verdict(calls: dict[str, dict[str, float]], ours: dict[str, float], ceiling: dict[str, float], direct: dict[str, float]) -> str:
    rl = {name: r["median"] for name, r in calls.items() if name.startswith("rltrack")}
    worst = max(rl.values())
    speedup = ours["rps"] / direct["rps"]
    direct_call = calls["mlflow.log_metrics, one call per record"]["median"]
    return "\n".join([
        f"- calling thread: rltrack medians {min(rl.values()):.1f}–{worst:.1f} µs across backend sets → target ≤ "
        f"{TARGET_CALL_US:g} µs **{'met' if worst <= TARGET_CALL_US else 'MISSED'}**; "
        f"calling mlflow.log_metrics directly costs {direct_call:,.0f} µs ({direct_call / worst:,.0f}× more).",
        f"- delivery: {ours['rps']:,.0f} vs {direct['rps']:,.0f} records/s = {speedup:.1f}× → target ≥ "
        f"{TARGET_SPEEDUP:g}× **{'met' if speedup >= TARGET_SPEEDUP else 'MISSED'}**; MlflowClient.log_batch alone, "
        f"1000 metrics a call, reaches {ceiling['rps'] / direct['rps']:.1f}× in the same store, so rltrack delivers at "
        f"{ours['rps'] / ceiling['rps']:.0%} of what this store takes in batches.",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI-sized run")
    parser.add_argument("--server", action="store_true", help="measure against a local mlflow server (SQLite behind it)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 3, quick 2)")
    parser.add_argument("--records", type=int, default=None, help="timed writes per rltrack system per round (default 2000, quick 500)")
    parser.add_argument("--delivery", type=int, default=None, help="records in the delivery run (default 20000, quick 3000)")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    per_round = args.records or (500 if args.quick else 2000)
    n_delivery = args.delivery or (3000 if args.quick else 20000)
    direct_per_round = 10 if args.quick else 40
    n_direct = 50 if args.quick else 300
    command = shlex.join(["python", os.path.relpath(__file__, REPO), *sys.argv[1:]])

    with tempfile.TemporaryDirectory(prefix="rltrack-bench-mlflow-") as tmpdir:
        root = Path(tmpdir)
        server = None
        if args.server:
            sys.path.insert(0, str(REPO / "tests"))
            from mlflow_server import MlflowServer

            server = MlflowServer(root)
            server.start()
        try:
            tracking_uri = server.uri if server else None
            uri = tracking_uri or f"sqlite:///{root / 'mlflow.db'}"
            load_at_start = load_average()
            started = time.perf_counter()
            warm = logger(root, "warmup", ["mlflow"], tracking_uri)  # creates the store and imports mlflow, untimed
            warm.write(dict.fromkeys(KEYS, 0.0), step=0)
            warm.close()
            calls = calling_thread(root, uri, tracking_uri, per_round, direct_per_round, rounds)
            ours = delivery_rltrack(root, tracking_uri, n_delivery)
            ceiling = delivery_log_batch(uri, n_delivery)
            direct = delivery_direct(uri, n_direct)
            elapsed = time.perf_counter() - started
        finally:
            if server:
                server.stop()

    import mlflow

    store = "a local `mlflow server` (SQLite store, loopback)" if args.server else "SQLite (`sqlite:///<root>/mlflow.db`, rltrack's embedded default)"
    print("\n".join([
        f"## bench_mlflow: MLflow through rltrack vs MLflow directly ({datetime.date.today().isoformat()})",
        "",
        f"Command: `{command}` (took {elapsed:.0f} s)  ",
        f"Machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), load average {load_at_start} at start, "
        f"{load_average()} at end; Python {platform.python_version()}; mlflow {mlflow.__version__}  ",
        f"Store: {store}; records of 10 floats.",
        "",
        "Calling-thread cost per record (µs):",
        "",
        calls_table(calls),
        "",
        "End-to-end delivery into the same store:",
        "",
        delivery_table({
            "rltrack [mlflow]: write all, until close() returns with all delivered": ours,
            "MlflowClient.log_batch, 1000 metrics a call (prepared)": ceiling,
            "mlflow.log_metrics, one call per record": direct,
        }, direct),
        "",
        "Verdict:",
        "",
        verdict(calls, ours, ceiling, direct),
    ]))


if __name__ == "__main__":
    main()
