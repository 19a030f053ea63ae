"""Timing helpers every benchmark shares: the standard 10-scalar record,
per-call samples on the calling thread (perf_counter_ns), systems measured
side by side in alternating rounds, and the median/p90/p99/mean summary in µs
with the spread of the per-round medians."""

from __future__ import annotations

import gc
import math
import statistics
import time
from typing import Any, Callable

#: (call one item, settle after a block, close at the end)
System = tuple[Callable[[Any], None], Callable[[], Any], Callable[[], Any]]

#: The keys of the standard record: 2 match the smoothing filter ("reward"), 3 the aggregate one ("loss").
KEYS = ["reward_mean", "reward_max", "episode_len", "loss", "value_loss",
        "policy_loss", "entropy", "lr", "fps", "grad_norm"]  # fmt: skip


def records(n: int) -> list[dict[str, float]]:
    """n records of 10 Python floats, built before any timing."""
    return [{key: i * 0.001 + j for j, key in enumerate(KEYS)} for i in range(n)]


def time_calls(call: Callable[[Any], None], items: list[Any], samples: list[int]) -> None:
    clock = time.perf_counter_ns
    for item in items:
        t0 = clock()
        call(item)
        samples.append(clock() - t0)


def percentile(sorted_ns: list[int], q: float) -> float:
    """Nearest-rank percentile of nanosecond samples, in microseconds."""
    index = min(len(sorted_ns) - 1, max(0, math.ceil(q / 100 * len(sorted_ns)) - 1))
    return sorted_ns[index] / 1000


def summary(samples: list[int], round_medians: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {"n": len(s), "median": percentile(s, 50), "p90": percentile(s, 90), "p99": percentile(s, 99),
            "mean": sum(s) / len(s) / 1000, "lo": min(round_medians), "hi": max(round_medians)}  # fmt: skip


def run_rounds(
    systems: dict[str, System],
    items: list[Any],
    rounds: int,
    warmup: int,
    own_items: dict[str, list[Any]] | None = None,
    per_round_cap: dict[str, int] | None = None,
) -> dict[str, dict[str, float]]:
    """Warm each system up, then time `rounds` blocks of items per system,
    rotating the order each round so no system always runs first. A system
    named in `own_items` is fed that list instead (aligned with `items`: the
    same records in the form that system takes); one named in
    `per_round_cap` times at most that many items a round (for native calls
    that take milliseconds each)."""
    feed = {name: (own_items or {}).get(name, items) for name in systems}
    caps = per_round_cap or {}
    for name, (call, settle, _) in systems.items():
        time_calls(call, feed[name][: min(warmup, caps.get(name, warmup))], [])
        settle()
    per_round = (len(items) - warmup) // rounds
    samples: dict[str, list[int]] = {name: [] for name in systems}
    medians: dict[str, list[float]] = {name: [] for name in systems}
    names = list(systems)
    for r in range(rounds):
        lo = warmup + r * per_round
        for name in names[r % len(names) :] + names[: r % len(names)]:
            call, settle, _ = systems[name]
            block: list[int] = []
            gc.collect()
            time_calls(call, feed[name][lo : lo + min(per_round, caps.get(name, per_round))], block)
            settle()
            samples[name] += block
            medians[name].append(percentile(sorted(block), 50))
    for _, _, close in systems.values():
        close()
    return {name: summary(samples[name], medians[name]) for name in names}


def ratio_table(results: dict[str, dict[str, float]], reference: str, per: str = "system", unit: str | None = None) -> str:
    """Markdown table of `summary` results with each median divided by `reference`'s."""
    ref = results[reference]["median"]
    lines = [f"| {per} | calls timed | median µs | p90 µs | p99 µs | mean µs | round medians µs | ÷ {unit or reference} |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, r in results.items():
        lines.append(f"| {name} | {r['n']:,} | {r['median']:.1f} | {r['p90']:.1f} | {r['p99']:.1f} | {r['mean']:.1f} "
                     f"| {r['lo']:.1f}–{r['hi']:.1f} | {r['median'] / ref:,.2f}× |")  # fmt: skip
    return "\n".join(lines)


def repeat_alternating(runs: dict[str, Callable[[], float]], repetitions: int) -> dict[str, dict[str, float]]:
    """Each run returns one measurement (seconds, records/s, ...); they are
    called in turn, `repetitions` times, the order rotated each repetition and
    reversed every other one: no run always follows the same one (whose
    background work, an agent's delivery, may spill into the next).
    Returns median, min, max and all values per run."""
    values: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(repetitions):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order if r % 2 == 0 else order[::-1]:
            gc.collect()
            values[name].append(runs[name]())
    return {name: {"median": statistics.median(v), "lo": min(v), "hi": max(v), "n": len(v), "values": v}  # type: ignore[dict-item]
            for name, v in values.items()}  # fmt: skip
