"""A tracker's coarser view of the journal: one value per key and time window.

Why this exists: a cluster's trackers pay per value (an MLflow server spends
over 100 µs of CPU on each, PostgreSQL tens more), while the journal, the
local files and storage keep every value for nothing. `[backends.<tracker>]
every = "10s"` (or `max_values_per_second = 0.1`, the same: at most that many
values per second of each key) sends each tracker at most one value per key
and window, the window's last (`thin = "last"`, the default) or its mean
(`thin = "mean"`), at the step and capture time of the window's last value.
What is left out is counted in report.json as `thinned`, never as dropped.

The windows are fixed slices of capture time (`floor(time / every)`), so a
delivery repeated from a cursor makes the same values; a window is sent once
a value of a later window arrives (of any key: a key logged once does not
hold its window open for the rest of the run), or at the end of the journal. The cursor
never moves past the first journal line of a window still open
(`held_from`): a delivery that resumes after a kill reads the whole window
again, and a tracker that keeps identical rows once (MLflow) stores nothing twice.
Only numeric events (`scalars`, `timing`) are thinned; every other kind
passes as it is.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from rltrack.core.events import NUMERIC_KINDS, Event
from rltrack.trackers.remote import EventId

#: The settings every tracker takes besides its own.
KEYS = ("every", "max_values_per_second", "thin")
HOW = ("last", "mean")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|min|m|h)\s*$")


def parse_every(value: Any) -> float:
    """Seconds from `every` = a number of seconds or a text such as "10s", "500ms", "2m", "1h"."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (found := _DURATION.match(value)):
        seconds = float(found[1]) * _UNITS[found[2]]
    else:
        raise ValueError(f'every = {value!r} must be a time such as "10s", "500ms", "2m" or a number of seconds; e.g. every = "10s"')
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f'every = {value!r} must be longer than 0 s, e.g. every = "10s" (leave it out to send every value)')
    return seconds


def split_settings(settings: Mapping[str, Any]) -> tuple[dict[str, Any], Thinning | None]:
    """A tracker's settings without the thinning keys, and the `Thinning` they
    ask for (None: every value). Raises ValueError naming the key, the value and the fix."""
    own = {key: value for key, value in settings.items() if key not in KEYS}
    every, rate, how = settings.get("every"), settings.get("max_values_per_second"), settings.get("thin", "last")
    if how not in HOW:
        raise ValueError(f'thin = {how!r} must be "last" (each window\'s last value) or "mean" (its mean); e.g. thin = "mean"')
    if every is not None and rate is not None:
        raise ValueError(f"every = {every!r} and max_values_per_second = {rate!r} both set the window: keep one")
    if rate is not None:
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"max_values_per_second = {rate!r} must be a number above 0 (values per second of each key), e.g. max_values_per_second = 1")
        every = 1.0 / rate
    if every is None:
        if "thin" in settings:
            raise ValueError(f'thin = {how!r} needs a window: add every = "10s" (or max_values_per_second)')
        return own, None
    return own, Thinning(parse_every(every), how)


@dataclass
class _Window:
    index: int  # floor(capture time / every)
    first: int  # journal offset of the line of its first value (the cursor stops before it while the window is open)
    last: Event  # the event of its last value
    last_id: EventId
    value: float  # the last value, or the sum for a mean
    count: int = 1


@dataclass
class Thinning:
    """Windows of `every` seconds per (namespace, key, kind) of one journal."""

    every: float
    how: str = "last"
    _open: dict[tuple[str, str, str], _Window] = field(default_factory=dict)
    _oldest: float = math.inf  # the lowest window index open

    def describe(self) -> str:
        return f"every {self.every:g} s, the {self.how} value per key and window"

    def take(self, events: list[Event], ids: list[EventId], starts: list[int]) -> tuple[list[Event], list[EventId], int]:
        """The events to send for `events` (`ids[i]` and the journal offset
        `starts[i]` where its line starts are those of `events[i]`): the
        windows they close and every non-numeric event, in journal order;
        their ids; and how many values were left out."""
        out: list[tuple[EventId, Event]] = []
        thinned = 0
        for event, event_id, start in zip(events, ids, starts):
            if event.kind not in NUMERIC_KINDS:
                out.append((event_id, event))
                continue
            index = math.floor(event.time / self.every)
            if index > self._oldest:
                out += self._close_before(index)
            for key, value in event.data.items():
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                slot = (event.namespace, key, event.kind)
                held = self._open.get(slot)
                if held is not None and held.index == index:
                    held.last, held.last_id, held.count = event, event_id, held.count + 1
                    held.value = held.value + value if self.how == "mean" else value
                    thinned += 1  # a window of n values sends one
                    continue
                if held is not None:
                    out.append((held.last_id, self._value(key, held)))
                self._open[slot] = _Window(index, start, event, event_id, float(value))
                self._oldest = min(self._oldest, index)
            others = {key: value for key, value in event.data.items() if not isinstance(value, (int, float)) or isinstance(value, bool)}
            if others:
                out.append((event_id, event.derive(others)))
        return (*self._grouped(out), thinned)

    def flush(self) -> tuple[list[Event], list[EventId]]:
        """Every open window (the end of the journal)."""
        return self._grouped(self._close_before(math.inf))

    def _close_before(self, index: float) -> list[tuple[EventId, Event]]:
        """The values of the open windows before window `index`, which close."""
        closing = [slot for slot, held in self._open.items() if held.index < index]
        out = [(self._open[slot].last_id, self._value(slot[1], self._open.pop(slot))) for slot in closing]
        self._oldest = min((held.index for held in self._open.values()), default=math.inf)
        return out

    def held_from(self) -> int | None:
        """The journal offset where the first line of the oldest open window starts (None: none open)."""
        return min((held.first for held in self._open.values()), default=None)

    def _value(self, key: str, held: _Window) -> Event:
        value = held.value / held.count if self.how == "mean" else held.value
        return held.last.derive({key: value})

    def _grouped(self, out: list[tuple[EventId, Event]]) -> tuple[list[Event], list[EventId]]:
        """Windows closed by one event go out as one event, in journal order."""
        merged: dict[tuple[EventId, str, str], tuple[EventId, Event]] = {}
        for event_id, event in sorted(out, key=lambda pair: pair[0].offset):
            slot = (event_id, event.namespace, event.kind)
            if slot in merged:
                merged[slot][1].data.update(event.data)
            else:
                merged[slot] = (event_id, event.derive(dict(event.data)))
        return [event for _, event in merged.values()], [event_id for event_id, _ in merged.values()]
