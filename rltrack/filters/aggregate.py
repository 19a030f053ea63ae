"""Store-then-log aggregation: many values in, mean/std/median/min/max out."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Sequence

from rltrack.events import Event
from rltrack.filters.base import Filter, check_positive, compile_regex


def _mean(xs: list[float]) -> float:
    return math.fsum(xs) / len(xs)


def _std(xs: list[float]) -> float:
    mean = _mean(xs)
    return math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / len(xs))  # ddof=0, as numpy


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


STATS: dict[str, Callable[[list[float]], float]] = {
    "mean": _mean,
    "std": _std,
    "median": _median,
    "min": min,
    "max": max,
    "sum": math.fsum,
    "count": len,
}


class _Window:
    """What one namespace has stored since its last emission."""

    def __init__(self, opened: float) -> None:
        self.values: dict[str, list[float]] = {}
        self.last: dict[str, Any] = {}
        self.records = 0
        self.opened = opened
        self.template: Event | None = None


class AggregateFilter(Filter):
    """Holds back values of keys matching `regex` (re.search), per namespace, and
    emits one record per namespace with `<key>_<stat>` (std with ddof=0) at
    `Logger.dump()`, every `every` records, every `seconds`, and at close.

    With `passthrough=True` keys that do not match flow on at once, so one chain
    can aggregate losses while rewards pass. With `passthrough=False` every key
    is held and the non-matching ones emit their last value at dump, which is
    SpinningUp's store-then-log behaviour. Emitted records take the steps given
    to `dump(step)`, else the last steps seen in their namespace.
    """

    empty_means_dropped = False

    def __init__(
        self,
        regex: str,
        stats: Sequence[str] = ("mean", "std", "median", "max", "min"),
        every: int | None = None,
        seconds: float | None = None,
        passthrough: bool = True,
    ) -> None:
        self._regex = compile_regex("regex", regex)
        if isinstance(stats, str) or not stats or any(s not in STATS for s in stats):
            raise ValueError(f"stats must be a non-empty list drawn from {', '.join(STATS)}, got {stats!r}")
        check_positive("every", every, integer=True, allow_none=True)
        check_positive("seconds", seconds, allow_none=True)
        if not isinstance(passthrough, bool):
            raise ValueError(f"passthrough must be true or false, got {passthrough!r}")
        self.stats = tuple(stats)
        self.every = every
        self.seconds = seconds
        self.passthrough = passthrough
        self._windows: dict[str, _Window] = {}

    def apply(self, event: Event) -> list[Event]:
        window = self._windows.get(event.namespace)
        if window is None:
            window = self._windows[event.namespace] = _Window(event.time)
        rest = {}
        held = False
        for key, value in event.data.items():
            if self._regex.search(key):
                if isinstance(value, (int, float)):
                    window.values.setdefault(key, []).append(float(value))
                    held = True
            elif self.passthrough:
                rest[key] = value
            else:
                window.last[key] = value
                held = True
        out = [replace(event, data=rest)] if rest else []
        if held:
            window.records += 1
            window.template = event
            if self._due(window, event.time):
                out.extend(self._emit(event.namespace, None, event.time))
        return out

    def flush(self, steps: dict[str, int] | None, now: float) -> list[Event]:
        return [e for ns in list(self._windows) for e in self._emit(ns, steps, now)]

    def tick(self, now: float) -> list[Event]:
        if self.seconds is None:
            return []
        return [e for ns, w in list(self._windows.items()) if self._due(w, now) for e in self._emit(ns, None, now)]

    def _due(self, window: _Window, now: float) -> bool:
        if self.every is not None and window.records >= self.every:
            return True
        return self.seconds is not None and window.records > 0 and now - window.opened >= self.seconds

    def _emit(self, namespace: str, steps: dict[str, int] | None, now: float) -> list[Event]:
        window = self._windows.pop(namespace)
        self._windows[namespace] = _Window(now)
        if window.template is None:
            return []
        data: dict[str, Any] = dict(window.last)
        for key, xs in window.values.items():
            for stat in self.stats:
                data[f"{key}_{stat}"] = STATS[stat](xs)
        if not data:
            return []
        return [replace(window.template, data=data, time=now, steps=dict(steps) if steps else window.template.steps)]
