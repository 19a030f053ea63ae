"""What sending a run to W&B or Neptune costs with rltrack, next to calling their clients directly.

Why this exists: issue 4 promises that a tracker never slows training (the
calling-thread cost of a 10-scalar record stays <= 10 us whatever the
backends), and users weigh that against `wandb.log` (~0.2 ms) and Neptune's
`append` (~46 us a value). Both clients run offline here, as rltrack's
backends do by default, with every file in a temporary directory.

1. Calling-thread cost, systems alternating in rounds (as in bench_write.py):
   bare capture (floor); rltrack with backends [wandb] and [neptune];
   `run.log(record, step=i)` on a W&B offline run; ten
   `run["learner/<key>"].append(value, step=i)` on a Neptune offline run.
   rltrack's background delivery keeps running during its own blocks (that
   contention is part of what users feel) and is let finish, untimed,
   before the next block.
2. End-to-end delivery: N records written to a fresh logger with one
   backend, timed until `close()` returns with everything delivered (checked
   in the `.wandb` file / Neptune's `data-*.log`); the delivery alone, as
   `rltrack sync` does it from a finished journal; and the clients called
   directly for the same N records, until `finish()` / `stop()` returns.

    python bench/bench_wandb_neptune.py           # full run, a few minutes
    python bench/bench_wandb_neptune.py --quick   # CI-sized
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench_write import KEYS, REPO, calls_table, load_average, median_us, records, summarise, time_block

import rltrack  # from this checkout: bench_write puts the repository first on sys.path
from rltrack.backends import RunContext, backend_class
from rltrack.delivery import DeliveryWorker, pending_bytes

sys.path.insert(0, str(REPO / "tests"))
import wandb_reader  # noqa: E402

TARGET_CALL_US = 10.0
System = tuple[Callable[[dict, int], None], Callable[[], None], Callable[[], None]]
NEPTUNE_OFF = {
    "capture_stdout": False, "capture_stderr": False, "capture_hardware_metrics": False,
    "capture_traceback": False, "git_ref": False, "source_files": [],
}


def isolate(tmp: Path) -> None:
    """Every file either client writes goes under `tmp`; their chatter is silenced."""
    os.environ.update(WANDB_SILENT="true", WANDB_MODE="offline")
    for var, sub in (("WANDB_CONFIG_DIR", "wandb_config"), ("WANDB_CACHE_DIR", "wandb_cache"), ("WANDB_DATA_DIR", "wandb_data"),
                     ("WANDB_ARTIFACT_DIR", "wandb_artifacts"), ("NEPTUNE_DATA_DIRECTORY", "direct/.neptune")):
        os.environ[var] = str(tmp / sub)
    os.environ.pop("RLTRACK_BACKENDS", None)
    import neptune  # noqa: F401 - its logger is configured on import; quieten it after

    logging.getLogger("neptune").setLevel(logging.WARNING)


def logger(root: Path, name: str, backend: str) -> rltrack.Logger:
    return rltrack.make_logger({"run": {"root": str(root), "name": name}, "backends": {"use": [backend]}})


def settled(log: rltrack.Logger, backend: str) -> None:
    """Everything written so far is in the journal and delivered."""
    log.flush()
    while pending_bytes(log.run_dir, backend):
        time.sleep(0.02)


def rltrack_system(root: Path, backend: str) -> System:
    log = logger(root, f"calls_{backend}", backend)
    write = log.write
    write(dict.fromkeys(KEYS, 0.0), step=0, namespace="learner")
    settled(log, backend)  # the client is imported and its run made, untimed
    return (lambda rec, i: write(rec, step=i, namespace="learner")), (lambda: settled(log, backend)), log.close


def wandb_run(root: Path, name: str) -> Any:
    import wandb

    settings = wandb.Settings(console="off", x_disable_stats=True, x_disable_machine_info=True, disable_git=True, save_code=False)
    return wandb.init(mode="offline", dir=str(root), project="bench", name=name, reinit="create_new", settings=settings)


def neptune_run() -> Any:
    import neptune

    return neptune.init_run(mode="offline", **NEPTUNE_OFF)


def wandb_direct(root: Path) -> System:
    run = wandb_run(root, "direct-calls")
    return (lambda rec, i: run.log(rec, step=i)), (lambda: None), run.finish


def neptune_append(run: Any) -> Callable[[dict, int], None]:
    def call(rec: dict, i: int) -> None:
        for key, value in rec.items():
            run[f"learner/{key}"].append(value, step=i)

    return call


def neptune_direct() -> System:
    run = neptune_run()
    return neptune_append(run), (lambda: None), run.stop


def bare_system() -> System:
    captured: list[dict] = []
    return (lambda rec, i: captured.append(dict(rec))), captured.clear, captured.clear


def calling_thread(root: Path, per_round: int, rounds: int) -> dict[str, dict[str, float]]:
    systems: dict[str, System] = {
        "bare capture (floor)": bare_system(),
        "rltrack, backends [wandb]": rltrack_system(root, "wandb"),
        "rltrack, backends [neptune]": rltrack_system(root, "neptune"),
        "wandb run.log(record, step=i), offline": wandb_direct(root / "direct"),
        "neptune 10 × append(value, step=i), offline": neptune_direct(),
    }
    recs = records(per_round * rounds)
    samples: dict[str, list[int]] = {name: [] for name in systems}
    medians: dict[str, list[float]] = {name: [] for name in systems}
    for r in range(rounds):
        for name, (call, settle, _) in systems.items():
            block: list[int] = []
            time_block(call, recs[r * per_round : (r + 1) * per_round], 1 + r * per_round, block)
            settle()
            samples[name] += block
            medians[name].append(median_us(block))
    for _, _, close in systems.values():
        close()
    return {name: summarise(samples[name], medians[name]) for name in systems}


# ---- what arrived -------------------------------------------------------------


def wandb_rows(run_dir: Path) -> int:
    return sum(1 for f in wandb_reader.run_files(run_dir) for row in wandb_reader.history(f) if "learner/loss" in row)


def neptune_values(run_dir: Path) -> int:
    count = 0
    for log in (run_dir / ".neptune" / "offline").glob("*/data-*.log"):
        for line in log.read_text().splitlines():
            op = json.loads(line)["obj"]
            if op["type"] == "LogFloats" and op["path"] == ["learner", "loss"]:
                count += len(op["values"])
    return count


ARRIVED = {"wandb": wandb_rows, "neptune": neptune_values}


def end_to_end(root: Path, backend: str, n: int) -> dict[str, float]:
    """Records/s from the first write until close() returns with all delivered."""
    log = logger(root, f"delivery_{backend}", backend)
    start = time.perf_counter()
    for i, rec in enumerate(records(n)):
        log.write(rec, step=i, namespace="learner")
    complete = log.close()
    elapsed = time.perf_counter() - start
    held = ARRIVED[backend](log.run_dir)
    if not complete or held != n:
        raise RuntimeError(f"{backend} holds {held} of {n} records (close() returned {complete})")
    return {"n": n, "seconds": elapsed, "rps": n / elapsed}


def sync_only(root: Path, backend: str, n: int) -> dict[str, float]:
    """Records/s of the delivery alone, from a finished journal (what `rltrack sync` runs)."""
    log = logger(root, f"sync_{backend}", "local")
    for i, rec in enumerate(records(n)):
        log.write(rec, step=i, namespace="learner")
    log.close()
    tracker = backend_class(backend)()
    tracker.open(RunContext(log.run_dir, log.name, log.config, log.report))
    start = time.perf_counter()
    DeliveryWorker(tracker, log.run_dir).run_until_caught_up("finished")  # type: ignore[arg-type]
    elapsed = time.perf_counter() - start
    held = ARRIVED[backend](log.run_dir)
    if held != n:
        raise RuntimeError(f"{backend} holds {held} of {n} records after sync")
    return {"n": n, "seconds": elapsed, "rps": n / elapsed}


def direct(root: Path, backend: str, n: int) -> dict[str, float]:
    """The client alone: n records, until finish()/stop() returns."""
    start = time.perf_counter()
    if backend == "wandb":
        run = wandb_run(root / "direct", "direct-delivery")
        for i, rec in enumerate(records(n)):
            run.log(rec, step=i)
        run.finish()
    else:
        run = neptune_run()
        call = neptune_append(run)
        for i, rec in enumerate(records(n)):
            call(rec, i)
        run.stop()
    elapsed = time.perf_counter() - start
    return {"n": n, "seconds": elapsed, "rps": n / elapsed}


# ---- report -------------------------------------------------------------------


def delivery_table(rows: dict[str, dict[str, float]]) -> str:
    lines = ["| path | records | seconds | records/s |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {r['n']:,} | {r['seconds']:.2f} | {r['rps']:,.0f} |" for name, r in rows.items()]
    return "\n".join(lines)


def verdict(calls: dict[str, dict[str, float]]) -> str:
    out = []
    for backend, direct_name in (("wandb", "wandb run.log(record, step=i), offline"), ("neptune", "neptune 10 × append(value, step=i), offline")):
        ours = calls[f"rltrack, backends [{backend}]"]["median"]
        theirs = calls[direct_name]["median"]
        out.append(
            f"- {backend}: rltrack {ours:.1f} µs per record on the calling thread → target ≤ {TARGET_CALL_US:g} µs "
            f"**{'met' if ours <= TARGET_CALL_US else 'MISSED'}**; the client called directly costs {theirs:,.0f} µs ({theirs / ours:,.0f}× more)."
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI-sized run")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 3, quick 2)")
    parser.add_argument("--records", type=int, default=None, help="timed writes per system per round (default 1000, quick 200)")
    parser.add_argument("--delivery", type=int, default=None, help="records in each delivery run (default 5000, quick 1000)")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    per_round = args.records or (200 if args.quick else 1000)
    n = args.delivery or (1000 if args.quick else 5000)
    command = shlex.join(["python", os.path.relpath(__file__, REPO), *sys.argv[1:]])

    with tempfile.TemporaryDirectory(prefix="rltrack-bench-wandb-neptune-") as tmpdir:
        root = Path(tmpdir)
        isolate(root)
        load_at_start = load_average()
        started = time.perf_counter()
        calls = calling_thread(root, per_round, rounds)
        delivery: dict[str, dict[str, float]] = {}
        for backend in ("wandb", "neptune"):
            delivery[f"rltrack [{backend}]: write all, close() returns with all delivered"] = end_to_end(root, backend, n)
            delivery[f"rltrack [{backend}]: delivery alone (sync of a finished journal)"] = sync_only(root, backend, n)
            delivery[f"{backend} client directly, until finish/stop returns"] = direct(root, backend, n)
        elapsed = time.perf_counter() - started

    import neptune
    import wandb

    print("\n".join([
        f"## bench_wandb_neptune: W&B and Neptune through rltrack vs their clients directly ({datetime.date.today().isoformat()})",
        "",
        f"Command: `{command}` (took {elapsed:.0f} s)  ",
        f"Machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), load average {load_at_start} at start, "
        f"{load_average()} at end; Python {platform.python_version()}; wandb {wandb.__version__}, neptune {neptune.__version__}, both offline  ",
        "Records of 10 floats.",
        "",
        "Calling-thread cost per record (µs):",
        "",
        calls_table(calls),
        "",
        "Delivery (records/s; rltrack's figures are checked against what the client wrote):",
        "",
        delivery_table(delivery),
        "",
        "Verdict:",
        "",
        verdict(calls),
    ]))


if __name__ == "__main__":
    main()
