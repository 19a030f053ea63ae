"""Where the local pipeline's time goes: µs per record of each stage, and of this Python's primitives.

Why this exists: the local backend's end-to-end target (≥ 100k records/s, so
10 µs a record for everything) is missed, and `bench_throughput.py` only says
by how much. This script times each stage the pipeline thread runs for a
record, alone, on the same pre-built 10-scalar records: normalise, each of the
four filters (on what the filters before it let through, as in the chain),
the journal line, the TensorBoard record, the text tables and progress.csv
rows. Beside them it times the Python primitives those stages are made of
(a function call, building an `Event`, a float's repr, an orjson line), so a
reader can tell what is rltrack's code and what is this interpreter. Each
figure is the fastest of `--repetitions` runs over fresh copies (the least
disturbed by other load), µs per record.

    python bench/bench_stages.py            # 20,000 records, 5 repetitions
    python bench/bench_stages.py --quick    # 2,000 records, 2 repetitions
"""

from __future__ import annotations

import tempfile
import time
import timeit
from pathlib import Path
from typing import Any, Callable

import orjson
import trackers
from report import Section, arguments
from timing import KEYS, records

from rltrack.sinks.base import RunContext
from rltrack.sinks.local import LocalBackend
from rltrack.delivery.construct import build_filter
from rltrack.core.events import Event
from rltrack.filters import FilterChain
from rltrack.journal import JournalWriter
from rltrack.core.report import Report
from rltrack.core.values import normalize


def fastest(repetitions: int, n: int, setup: Callable[[], Any], stage: Callable[[Any], object]) -> float:
    """µs per record of `stage(setup())`, the fastest of `repetitions` runs."""
    best = float("inf")
    for _ in range(repetitions):
        arg = setup()
        start = time.perf_counter()
        stage(arg)
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def main() -> None:
    parser = arguments(__doc__, "2,000 records, 2 repetitions")
    parser.add_argument("--repetitions", type=int, default=None, help="default 5, quick 2")
    args = parser.parse_args()
    n, reps = (2_000, args.repetitions or 2) if args.quick else (20_000, args.repetitions or 5)
    section = Section()
    recs = records(n)
    report = Report()
    folders = iter(range(10**6))
    root = Path(tempfile.mkdtemp(prefix="rltrack-bench-stages-"))

    def events() -> list[Event]:
        now = time.time()
        return [Event(now + i * 1e-5, dict(rec), "scalars", "learner", {"step": i}) for i, rec in enumerate(recs)]

    def chain() -> FilterChain:
        return FilterChain([build_filter(spec, "bench") for spec in trackers.FILTERS], report)

    def local() -> LocalBackend:
        backend = LocalBackend()
        backend.open(RunContext(run_dir=root / f"local{next(folders)}", name="bench", config={}, report=report, worker=None))
        return backend

    filtered = [out for event in events() for out in chain().process(event)]
    rows: list[tuple[str, float]] = [("normalise (plain-record check)", fastest(reps, n, events, lambda evs: [normalize(e, report) for e in evs]))]
    for index, spec in enumerate(trackers.FILTERS):

        def before(index: int = index) -> tuple[Any, list[Event]]:
            filters = chain().filters
            evs = events()
            for earlier in filters[:index]:
                evs = [out for e in evs for out in earlier.apply(e)]
            return filters[index], evs

        rows.append((f"filter {spec['type']}", fastest(reps, n, before, lambda a: [out for e in a[1] for out in a[0].apply(e)])))
    rows += [
        ("filter chain, all four (`FilterChain.process`)", fastest(reps, n, lambda: (chain(), events()), lambda a: [o for e in a[1] for o in a[0].process(e)])),
        ("journal line and write", fastest(reps, n, lambda: JournalWriter(root / f"journal{next(folders)}.jsonl"), lambda j: (j.append(filtered), j.close()))),
        ("TensorBoard record", fastest(reps, n, local, lambda b: [b._tb.write(e) for e in filtered])),
        ("text tables and progress.csv rows", fastest(reps, n, local, lambda b: [b._numeric(e) for e in filtered])),
        ("local backend, all of it (`LocalBackend.write`)", fastest(reps, n, local, lambda b: (b.write(filtered), b.flush()))),
    ]
    total = rows[0][1] + sum(value for name, value in rows if name.startswith(("filter chain", "journal", "local backend")))
    sample = {key: 0.001 * j + 7.123456789 for j, key in enumerate(KEYS)}
    number = 200_000 if not args.quick else 20_000

    def per_call(statement: Callable[[], object]) -> float:
        return min(timeit.repeat(statement, number=number, repeat=3)) / number * 1e6

    def call(x: Any) -> Any:
        return x

    value = 1234.5678901234
    primitives = [
        ("a Python function call", per_call(lambda: call(1))),
        ("building an `Event` (what each filter that changes a record does)", per_call(lambda: Event(1.0, sample, "scalars", "learner", {}))),
        ("`repr` of one float", per_call(lambda: repr(value))),
        ("`round(x, 6)` of one float", per_call(lambda: round(value, 6))),
        ("orjson of a 10-float dict", per_call(lambda: orjson.dumps(sample))),
        ("json's `repr`-based text of 10 floats", per_call(lambda: ",".join(map(repr, sample.values())))),
    ]
    lines = [
        f"{n:,} records of 10 floats through the four filters of `trackers.FILTERS`; fastest of {reps} runs, µs per record.", "",
        "| stage of the pipeline thread | µs per record |", "|---|---:|",
        *(f"| {name} | {us:.2f} |" for name, us in rows),
        f"| **normalise + filter chain + journal + local backend** | **{total:.2f}** |", "",
        "| this Python's primitive | µs per call |", "|---|---:|",
        *(f"| {name} | {us:.3f} |" for name, us in primitives), "",
        f"The target (≥ 100k records/s end to end) leaves 10 µs a record for all of it, the calling thread's `write` included: "
        f"the stages above take {total:.1f} µs on their own.",
    ]  # fmt: skip
    section.finish("bench_stages: the local pipeline's µs per record, stage by stage", "\n".join(lines), write=not args.no_write)


if __name__ == "__main__":
    main()
