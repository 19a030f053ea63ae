"""Store-then-log aggregation: many values in, mean/std/median/min/max out."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from rltrack.core.events import Event
from rltrack.filters.base import Filter, KeyMatcher, as_float, check_positive


def _sum(xs: list[float]) -> float:
    """Exact sum; `math.fsum` raises on inf + -inf and on overflow, where numpy
    gives nan or inf, and a raise here would stop the pipeline thread."""
    try:
        return math.fsum(xs)
    except (OverflowError, ValueError):
        return sum(xs)


def _mean(xs: list[float]) -> float:
    return _sum(xs) / len(xs)


def _std(xs: list[float]) -> float:
    mean = _mean(xs)
    return math.sqrt(_sum([(x - mean) * (x - mean) for x in xs]) / len(xs))  # ddof=0, as numpy; `**` raises on overflow


def _nan_aware(stat: Callable[[list[float]], float]) -> Callable[[list[float]], float]:
    """nan if any value is nan, as numpy does: a diverged loss must show, and
    `sorted`/`min`/`max` give an order-dependent answer on nan."""
    return lambda xs: math.nan if any(map(math.isnan, xs)) else stat(xs)


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


STATS: dict[str, Callable[[list[float]], float]] = {
    "mean": _mean,
    "std": _std,
    "median": _nan_aware(_median),
    "min": _nan_aware(min),
    "max": _nan_aware(max),
    "sum": _sum,
    "count": len,
}


class _Window:
    """What one namespace has stored since its last emission."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}
        self.last: dict[str, Any] = {}
        self.records = 0
        self.opened = 0.0  # capture time of the first value held
        self.template: Event | None = None


class AggregateFilter(Filter):
    """Holds back values of keys matching `regex` (re.search), per namespace, and
    emits one record per namespace with `<key>_<stat>` (std with ddof=0) at
    `Logger.dump()`, every `every` records, every `seconds`, and at close.
    A `seconds` window starts at its first value (capture time) and is emitted
    by the pipeline's periodic `tick`, or by the first value arriving after it
    ended. Statistics follow numpy on nan and inf (a diverged loss shows as nan).

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
        self._matches = KeyMatcher("regex", regex)
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
        # A window is [first value, first value + seconds): a value arriving after
        # it expired (no tick came in between) closes it and opens the next one.
        namespace = event.namespace
        out = self._emit(namespace, None, event.time) if self.seconds is not None and self._expired(namespace, event.time) else []
        window = self._windows.get(namespace)
        if window is None:
            window = self._windows[namespace] = _Window()
        data = event.data
        matching = self._matches.among(data)
        held = False
        values = window.values
        for key in matching:
            value = data[key]
            if type(value) is not float:  # floats, most values, without a call
                value = as_float(value)
                if value is None:
                    continue
            stored = values.get(key)
            if stored is None:
                values[key] = [value]
            else:
                stored.append(value)
            held = True
        if len(matching) < len(data):
            if not matching:
                rest = data
            else:  # a copy less the matching keys: quicker than a comprehension over the others
                rest = dict(data)
                for key in matching:
                    del rest[key]
            if self.passthrough:
                out.append(event.derive(rest))
            else:
                window.last.update(rest)
                held = True
        if held:
            if window.records == 0:
                window.opened = event.time
            window.records += 1
            window.template = event
            if self.every is not None and window.records >= self.every:
                out.extend(self._emit(namespace, None, event.time))
        return out

    def flush(self, steps: dict[str, int] | None, now: float) -> list[Event]:
        return [e for ns in list(self._windows) for e in self._emit(ns, steps, now)]

    def tick(self, now: float) -> list[Event]:
        return [e for ns in list(self._windows) if self._expired(ns, now) for e in self._emit(ns, None, now)]

    def _expired(self, namespace: str, now: float) -> bool:
        window = self._windows.get(namespace)
        if self.seconds is None or window is None or window.records == 0:
            return False
        return now - window.opened >= self.seconds

    def _emit(self, namespace: str, steps: dict[str, int] | None, now: float) -> list[Event]:
        window = self._windows.pop(namespace)
        self._windows[namespace] = _Window()
        if window.template is None:
            return []
        data: dict[str, Any] = dict(window.last)
        for key, xs in window.values.items():
            for stat in self.stats:
                data[f"{key}_{stat}"] = STATS[stat](xs)
        if not data:
            return []
        return [window.template.derive(data, time=now, steps=dict(steps) if steps else window.template.steps)]
