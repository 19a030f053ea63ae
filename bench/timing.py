"""Timing helpers the adapter benchmarks share: per-call samples on the calling
thread (perf_counter_ns) and their median/p90/p99/mean summary in µs."""

from __future__ import annotations

import gc
import math
import time
from typing import Any, Callable

#: (call one item, settle after a block, close at the end)
System = tuple[Callable[[Any], None], Callable[[], Any], Callable[[], Any]]


def time_calls(call: Callable[[Any], None], items: list[Any], samples: list[int]) -> None:
    clock = time.perf_counter_ns
    for item in items:
        t0 = clock()
        call(item)
        samples.append(clock() - t0)


def percentile(sorted_ns: list[int], q: float) -> float:
    index = min(len(sorted_ns) - 1, max(0, math.ceil(q / 100 * len(sorted_ns)) - 1))
    return sorted_ns[index] / 1000


def summary(samples: list[int], round_medians: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {"n": len(s), "median": percentile(s, 50), "p90": percentile(s, 90), "p99": percentile(s, 99),
            "mean": sum(s) / len(s) / 1000, "lo": min(round_medians), "hi": max(round_medians)}  # fmt: skip


def run_rounds(
    systems: dict[str, System], items: list[Any], rounds: int, warmup: int, own_items: dict[str, list[Any]] | None = None
) -> dict[str, dict[str, float]]:
    """Warm each system up, then time `rounds` blocks of items per system,
    rotating the order each round so no system always runs first. A system
    named in `own_items` is fed that list instead (aligned with `items`: the
    same records in the form that system takes)."""
    feed = {name: (own_items or {}).get(name, items) for name in systems}
    for name, (call, settle, _) in systems.items():
        time_calls(call, feed[name][:warmup], [])
        settle()
    per_round = (len(items) - warmup) // rounds
    samples: dict[str, list[int]] = {name: [] for name in systems}
    medians: dict[str, list[float]] = {name: [] for name in systems}
    names = list(systems)
    for r in range(rounds):
        lo, hi = warmup + r * per_round, warmup + (r + 1) * per_round
        for name in names[r % len(names):] + names[: r % len(names)]:
            call, settle, _ = systems[name]
            block: list[int] = []
            gc.collect()
            time_calls(call, feed[name][lo:hi], block)
            settle()
            samples[name] += block
            medians[name].append(percentile(sorted(block), 50))
    for _, _, close in systems.values():
        close()
    return {name: summary(samples[name], medians[name]) for name in names}


def ratio_table(results: dict[str, dict[str, float]], reference: str, per: str = "system", unit: str | None = None) -> str:
    """Markdown table of `summary` results with each median divided by `reference`'s."""
    ref = results[reference]["median"]
    lines = [f"| {per} | median µs | p90 µs | p99 µs | mean µs | round medians µs | ÷ {unit or reference} |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['median']:.1f} | {r['p90']:.1f} | {r['p99']:.1f} | {r['mean']:.1f} "
                     f"| {r['lo']:.1f}–{r['hi']:.1f} | {r['median'] / ref:.2f}× |")  # fmt: skip
    return "\n".join(lines)
