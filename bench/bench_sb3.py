"""Calling-thread cost of the Stable-Baselines3 adapter, beside SB3's own logger.

Per SB3 dump of a 10-key record as PPO makes it (`rollout/ep_rew_mean`,
`rollout/ep_len_mean` as numpy floats, `time/fps`, `time/iterations`,
`time/time_elapsed`, `time/total_timesteps` as ints, the last three with
`exclude="tensorboard"` as SB3 records them, and four `train/` losses as
numpy floats): 10 x `Logger.record` + `Logger.dump(step)`, timed together
with perf_counter_ns on the calling thread.

  * SB3 csv+json+tensorboard      - SB3's `configure(folder, ["csv", "json", "tensorboard"])`
                                    logger: the native path and the reference;
  * SB3 csv+json+tensorboard + rltrack
                                  - the same logger with an `RLTrackWriter` appended (what
                                    `attach(model, logger)` does), rltrack with the local
                                    backend and no filters (every event reaches the journal,
                                    tfevents, csv and text logs on the pipeline thread);
  * SB3 Logger with only RLTrackWriter
                                  - record + dump with rltrack as the only format;
  * RLTrackWriter.write alone     - the writer's `write(key_values, key_excluded, step)`
                                    with the dicts SB3 would pass, nothing else.

Then a burst of dumps straight into `RLTrackWriter.write`, timed until
`flush()` returns: what the pipeline thread spends per SB3 dump.

Systems alternate in rounds so machine noise hits all of them alike; between
blocks each is settled untimed (rltrack `flush()`), so no background backlog
is billed to the next block. A block lasts long enough (hundreds of dumps) for
rltrack's pipeline thread to run during it, so GIL sharing is in the figures.

    python bench/bench_sb3.py            # about 30 s
    python bench/bench_sb3.py --quick    # a few seconds
"""

from __future__ import annotations

import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import rltrack  # noqa: E402
from rltrack.adapters.sb3 import RLTrackWriter  # noqa: E402
from report import Section, arguments  # noqa: E402  (bench/ is sys.path[0])
from timing import System, ratio_table, run_rounds  # noqa: E402


#: The system fed pre-built SB3 dicts (what Logger.dump hands each writer) instead of record() calls.
WRITER_ALONE = "RLTrackWriter.write alone"
EXCLUDED = {"time/iterations", "time/time_elapsed", "time/total_timesteps"}


def sb3_records(n: int, seed: int = 0) -> list[tuple[int, list[tuple[str, Any]]]]:
    """n dumps of 10 values as PPO records them: (step, [(key, value), ...])."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        step = 2048 * (i + 1)
        out.append((step, [
            ("rollout/ep_rew_mean", np.float64(rng.normal(100, 10))), ("rollout/ep_len_mean", np.float64(rng.normal(100, 10))),
            ("time/fps", int(rng.integers(800, 1200))), ("time/iterations", i + 1), ("time/time_elapsed", i // 2),
            ("time/total_timesteps", step), ("train/loss", np.float64(rng.random())), ("train/value_loss", np.float64(rng.random())),
            ("train/policy_gradient_loss", np.float64(rng.random())), ("train/approx_kl", np.float32(rng.random())),
        ]))  # fmt: skip
    return out


def record_and_dump(sb3_logger: Any) -> Callable[[Any], None]:
    record, dump = sb3_logger.record, sb3_logger.dump

    def call(item: tuple[int, list[tuple[str, Any]]]) -> None:
        step, values = item
        for key, value in values:
            record(key, value, exclude="tensorboard" if key in EXCLUDED else None)
        dump(step)

    return call


def writer_alone(writer: Any) -> Callable[[Any], None]:
    def call(item: tuple[int, dict[str, Any], dict[str, tuple[str, ...]]]) -> None:
        step, key_values, key_excluded = item
        writer.write(key_values, key_excluded, step)

    return call


def systems(tmp: Path) -> dict[str, System]:
    from stable_baselines3.common.logger import configure

    formats = ["csv", "json", "tensorboard"]
    native = configure(str(tmp / "sb3_native"), formats)
    with_ours = configure(str(tmp / "sb3_with_rltrack"), formats)
    ours_logger = rltrack.make_logger(run={"root": str(tmp / "runs"), "name": "with"}, backends={"use": ["local"]})
    with_ours.output_formats.append(RLTrackWriter(ours_logger))
    only_logger = rltrack.make_logger(run={"root": str(tmp / "runs"), "name": "only"}, backends={"use": ["local"]})
    from stable_baselines3.common.logger import Logger

    only = Logger(None, [RLTrackWriter(only_logger)])
    alone_logger = rltrack.make_logger(run={"root": str(tmp / "runs"), "name": "alone"}, backends={"use": ["local"]})
    alone = RLTrackWriter(alone_logger)
    nothing = lambda: None  # noqa: E731
    return {
        "SB3 csv+json+tensorboard (native)": (record_and_dump(native), nothing, native.close),
        "SB3 csv+json+tensorboard + RLTrackWriter": (record_and_dump(with_ours), ours_logger.flush, lambda: (with_ours.close(), ours_logger.close())),
        "SB3 Logger with only RLTrackWriter": (record_and_dump(only), only_logger.flush, only_logger.close),
        WRITER_ALONE: (writer_alone(alone), alone_logger.flush, alone_logger.close),
    }


def as_sb3_dicts(items: list[tuple[int, list[tuple[str, Any]]]]) -> list[tuple[int, dict[str, Any], dict[str, tuple[str, ...]]]]:
    """What SB3's Logger.dump hands each writer: values and exclusions by key."""
    return [
        (step, dict(values), {key: ("tensorboard",) if key in EXCLUDED else ("",) for key, _ in values})
        for step, values in items
    ]


def pipeline_per_dump(tmp: Path, n: int) -> tuple[float, float]:
    """A burst of n dumps through RLTrackWriter.write into a fresh logger (local
    backend): (calling-thread µs per dump, µs per dump until flush() returns,
    i.e. until the pipeline thread has written everything)."""
    logger = rltrack.make_logger(run={"root": str(tmp / "runs"), "name": "burst"}, backends={"use": ["local"]})
    writer = RLTrackWriter(logger)
    items = as_sb3_dicts(sb3_records(n, seed=1))
    gc.collect()
    t0 = time.perf_counter()
    for step, key_values, key_excluded in items:
        writer.write(key_values, key_excluded, step)
    t1 = time.perf_counter()
    logger.flush()
    t2 = time.perf_counter()
    logger.close()
    return (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6


def main() -> None:
    parser = arguments(__doc__, "1,500 dumps per system")
    parser.add_argument("--dumps", type=int, default=10_000, help="timed dumps per system")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.quick:
        args.dumps = 1_500
    section = Section()
    warmup = 200
    with tempfile.TemporaryDirectory(prefix="rltrack-bench-sb3-") as tmp_name:
        items = sb3_records(args.dumps + warmup)
        results = run_rounds(systems(Path(tmp_name)), items, args.rounds, warmup, own_items={WRITER_ALONE: as_sb3_dicts(items)})
        burst_write, burst_total = pipeline_per_dump(Path(tmp_name), args.dumps // 2)
    native = "SB3 csv+json+tensorboard (native)"
    both = "SB3 csv+json+tensorboard + RLTrackWriter"
    added = results[both]["median"] - results[native]["median"]
    alone = results["RLTrackWriter.write alone"]["median"]
    body = "\n".join([
        f"{args.dumps:,} timed dumps per system, {args.rounds} alternating rounds; rltrack with the local backend, no filters.",
        "",
        ratio_table(results, native, per="system (per dump of 10 keys)", unit="SB3 native"),
        "",
        f"- Attaching rltrack to SB3's csv+json+tensorboard logger adds {added:.1f} µs per dump (median, "
        f"{results[both]['median'] / results[native]['median']:.2f}×); `RLTrackWriter.write` itself takes {alone:.1f} µs "
        f"({alone / 10:.2f} µs per key).",
        f"- Mean per dump: {results[native]['mean']:.0f} µs native, {results[both]['mean']:.0f} µs with rltrack: the "
        "difference beyond the writer's own cost is rltrack's pipeline thread doing its work for each dump "
        "(journal, tfevents, csv, text tables) while holding the GIL.",
        f"- Burst of {args.dumps // 2:,} dumps straight into RLTrackWriter.write (local backend): {burst_write:.1f} µs per dump "
        f"on the calling thread, {burst_total:.0f} µs per dump until flush() returns (the pipeline thread's throughput, "
        "about what one SB3 dump costs the process in total).",
    ])  # fmt: skip
    section.finish("bench_sb3: SB3 adapter, calling-thread cost per dump", body, write=not args.no_write)


if __name__ == "__main__":
    main()
