"""Timing helpers the adapter benchmarks share: per-call samples on the calling
thread (perf_counter_ns) and their median/p90/p99/mean summary in µs."""

from __future__ import annotations

import math
import time
from typing import Any, Callable


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
