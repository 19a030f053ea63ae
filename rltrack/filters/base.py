"""The filter interface and the chain that runs filters in order.

A filter is a small object with `apply(event) -> list[Event]` (an empty list
drops the record, more than one event emits extra records) and, when it holds
state, `flush(steps, now)` for the "store then log" point (`Logger.dump`) and
`tick(now)` for emissions that fall due with time. Filters see only `scalars`
records: text, hparams, artifacts and the rest are never filtered away.
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

from rltrack.core.events import Event
from rltrack.core.report import Report


class Filter:
    """Base class: passes everything, holds nothing."""

    #: An empty result from `apply` means the record was dropped (counted in the
    #: report), not held back for later as an aggregating filter does.
    empty_means_dropped = True

    def apply(self, event: Event) -> list[Event]:
        return [event]

    def flush(self, steps: dict[str, int] | None, now: float) -> list[Event]:
        return []

    def tick(self, now: float) -> list[Event]:
        return []


class FilterChain:
    """Runs events through filters in config order; what a filter emits at
    dump or tick time goes through the filters after it, not before."""

    def __init__(self, filters: Sequence[Filter], report: Report) -> None:
        self.filters = list(filters)
        self._report = report

    def process(self, event: Event) -> list[Event]:
        if event.kind != "scalars":
            return [event]
        return self._run([event], 0)

    def dump(self, steps: dict[str, int] | None, now: float) -> list[Event]:
        return self._emit(lambda f: f.flush(steps, now))

    def tick(self, now: float) -> list[Event]:
        return self._emit(lambda f: f.tick(now))

    def _emit(self, emit: Any) -> list[Event]:
        out: list[Event] = []
        for index, filt in enumerate(self.filters):
            out.extend(self._run(emit(filt), index + 1))
        return out

    def _run(self, events: list[Event], start: int) -> list[Event]:
        for filt in self.filters[start:] if start else self.filters:
            if len(events) == 1:  # the common case, without the list building below
                passed = filt.apply(events[0])
                if not passed and filt.empty_means_dropped:
                    self._report.count("filtered", type(filt).__name__)
                events = passed
                continue
            if not events:
                break
            passed = []
            for event in events:
                result = filt.apply(event)
                if not result and filt.empty_means_dropped:
                    self._report.count("filtered", type(filt).__name__)
                passed.extend(result)
            events = passed
        return events


class KeyMatcher:
    """The keys `re.search(pattern, key)` matches, remembered: filters see the
    same few keys on every record, so `among(data)` looks the record's key
    tuple up instead of searching each key, and `__call__(key)` a single key.
    At most `limit` entries of each are remembered, so a run that invents new
    keys forever keeps bounded memory (and is searched as before)."""

    def __init__(self, name: str, pattern: Any, limit: int = 4096) -> None:
        self.regex = compile_regex(name, pattern)
        self._known: dict[str, bool] = {}
        self._selected: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._limit = limit

    def __call__(self, key: str) -> bool:
        known = self._known.get(key)
        if known is None:
            known = self.regex.search(key) is not None
            if len(self._known) < self._limit:
                self._known[key] = known
        return known

    def among(self, data: dict[str, Any]) -> tuple[str, ...]:
        """The keys of `data` that match, in `data`'s order."""
        keys = tuple(data)
        selected = self._selected.get(keys)
        if selected is None:
            selected = tuple(key for key in keys if self(key))
            if len(self._selected) < self._limit:
                self._selected[keys] = selected
        return selected


def as_float(value: Any) -> float | None:
    """A number as a float for statistics, None for anything else. An int beyond
    a double's range is +-inf: float() raises on it, which would lose the record."""
    if not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def compile_regex(name: str, pattern: Any) -> re.Pattern[str]:
    """`re.compile` with an error that says which parameter and what is wrong."""
    if not isinstance(pattern, str):
        raise ValueError(f"{name} must be a regular expression string, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(
            f"{name}={pattern!r} is not a valid regular expression ({exc}); "
            "escape special characters, e.g. 'loss\\\\(' instead of 'loss('"
        ) from None


def check_positive(name: str, value: Any, *, integer: bool = False, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        what = "a positive integer" if integer else "a positive number"
        raise ValueError(f"{name} must be {what}, got {value!r}")
