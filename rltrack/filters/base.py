"""The filter interface and the chain that runs filters in order.

A filter is a small object with `apply(event) -> list[Event]` (an empty list
drops the record, more than one event emits extra records) and, when it holds
state, `flush(steps, now)` for the "store then log" point (`Logger.dump`) and
`tick(now)` for emissions that fall due with time. Filters see only `scalars`
records: text, hparams, artifacts and the rest are never filtered away.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from rltrack.events import Event
from rltrack.report import Report


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
        for filt in self.filters[start:]:
            if not events:
                break
            passed: list[Event] = []
            for event in events:
                result = filt.apply(event)
                if not result and filt.empty_means_dropped:
                    self._report.count("filtered", type(filt).__name__)
                passed.extend(result)
            events = passed
        return events


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
