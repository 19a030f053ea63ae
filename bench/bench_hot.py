"""CPU per record of each step on the hot path: journal line, parse, MLflow batch, MLflow's SQLite rows.

Why this exists: issue 30 asks for the per-key and per-line work of the
delivery path to shrink (MLflow keys cached, one JSON encode per line). The
end-to-end benchmarks (bench_throughput.py) mix these steps with the
agent's scheduling and, under load, with other processes; this one times
each step alone, in CPU time (`time.process_time`, best of `--repetitions`),
on events of 10 floats, so two trees compare side by side: run it once per
tree (`PYTHONPATH=<tree>`), alternating.

  * encode       - `Event.to_line` (a tree before it: `to_json()` + encode), for
                   10 floats, 9 floats and a None, 8 floats, a None and a NaN,
                   joined 100 at a time as the journal joins a batch;
  * parse        - `rltrack.journal.parse_line` of a 10-float line;
  * MLflow batch - `MlflowBatch` of 100 events at a time (keys, steps, stamps, counts);
  * SQLite rows  - `SqliteMetricWriter.write` staging a batch's rows (no database);
  * MLflow whole - `DeliveryWorker` delivering a journal to a fresh `sqlite:///`
                   store to the end (read, build, write, commit), as the
                   agent's MLflow lane and `rltrack sync --to mlflow` do.

    python bench/bench_hot.py            # about a minute
    python bench/bench_hot.py --quick    # fewer events
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import trackers
from report import Section, arguments
from timing import KEYS

from rltrack.delivery.registry import RunContext
from rltrack.trackers.mlflow.batch import MlflowBatch
from rltrack.trackers.mlflow.sqlite import SqliteMetricWriter
from rltrack.delivery.construct import build_backend
from rltrack.delivery.worker import DeliveryWorker
from rltrack.core.events import Event
from rltrack.journal import JournalWriter, parse_line
from rltrack.core.report import Report


def events(n: int, extra: dict[str, Any] | None = None) -> list[Event]:
    """n events of 10 values: random floats (a float's repr costs what its
    digits cost: training metrics have all 17), the last ones `extra`."""
    keys = KEYS[: len(KEYS) - len(extra or {})]
    rng = random.Random(0)
    return [Event(1.7e9 + i * 0.001, {**{k: rng.random() + j for j, k in enumerate(keys)}, **(extra or {})}, "scalars", "learner", {"step": i}) for i in range(n)]


def encoder() -> Callable[[Event], bytes]:
    to_line = getattr(Event, "to_line", None)
    return to_line if to_line is not None else lambda event: (event.to_json() + "\n").encode()


def lines_of(evs: list[Event], encode: Callable[[Event], bytes]) -> None:
    """The journal's bytes of `evs`, 100 events at a time, as `JournalWriter.append` joins them."""
    for i in range(0, len(evs), 100):
        b"".join([encode(event) for event in evs[i : i + 100]])


class NoDatabase:
    def execute(self, *args: Any) -> None: ...

    def executemany(self, *args: Any) -> None: ...


def cpu_us(run: Callable[[], None], n: int, repetitions: int) -> float:
    best = math.inf
    for _ in range(repetitions):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best / n * 1e6


def mlflow_whole(tmp: Path, evs: list[Event]) -> Callable[[], None]:
    def run() -> None:
        run_dir = Path(tempfile.mkdtemp(dir=tmp))
        journal = JournalWriter(run_dir / "journal.jsonl")
        journal.append(evs)
        journal.close()
        backend = build_backend("mlflow", {"tracking_uri": f"sqlite:///{tmp}/mlflow.db"}, "bench")
        backend.open(RunContext(run_dir=run_dir, name=run_dir.name, config={}, report=Report()))
        DeliveryWorker(backend, run_dir, close_at_end=True).run_until_caught_up("finished")

    return run


def main() -> None:
    parser = arguments(__doc__, "5,000 events instead of 20,000")
    parser.add_argument("--repetitions", type=int, default=5, help="best of (default 5)")
    args = parser.parse_args()
    n = 5_000 if args.quick else 20_000
    section = Section()
    plain, none, nan = events(n), events(n, {"none": None}), events(n, {"none": None, "nan": math.nan})
    encode = encoder()
    lines = [encode(event) for event in plain]
    batches = [plain[i : i + 100] for i in range(0, n, 100)]
    built = [MlflowBatch(batch, Path("/tmp"), {}, {}, {}) for batch in batches]

    def stage_rows() -> None:
        writer = SqliteMetricWriter(NoDatabase())  # type: ignore[arg-type]
        for batch in built:
            writer.write("run", batch.metrics)

    results = {
        "encode: 10 floats": cpu_us(lambda: lines_of(plain, encode), n, args.repetitions),
        "encode: 9 floats and a None": cpu_us(lambda: lines_of(none, encode), n, args.repetitions),
        "encode: 8 floats, a None and a NaN": cpu_us(lambda: lines_of(nan, encode), n, args.repetitions),
        "parse a 10-float line": cpu_us(lambda: [parse_line(line) for line in lines], n, args.repetitions),
        "MlflowBatch, 100 events a batch": cpu_us(lambda: [MlflowBatch(b, Path("/tmp"), {}, {}, {}) for b in batches], n, args.repetitions),
        "SqliteMetricWriter.write (staging, no database)": cpu_us(stage_rows, n, args.repetitions),
    }
    with tempfile.TemporaryDirectory(prefix="rltrack-bench-hot-") as tmp_name:
        tmp = Path(tmp_name)
        trackers.isolate(tmp)
        import mlflow

        mlflow.MlflowClient(f"sqlite:///{tmp}/mlflow.db").search_experiments()  # the store is made before timing
        results["MLflow delivery whole: journal to a sqlite:/// store"] = cpu_us(mlflow_whole(tmp, plain), n, min(args.repetitions, 3))
    body = "\n".join([f"{n:,} events of 10 values (random floats); CPU µs per event, best of {args.repetitions} (MLflow whole: of {min(args.repetitions, 3)}).", "",
                      "| step | CPU µs/event |", "|---|---:|", *(f"| {name} | {us:.2f} |" for name, us in results.items())])  # fmt: skip
    section.finish("bench_hot: CPU per event of each hot-path step", body, write=not args.no_write)


if __name__ == "__main__":
    main()
