"""Rate limiting by time, like Acme's TimeFilter, per namespace."""

from __future__ import annotations

from rltrack.core.events import Event
from rltrack.filters.base import Filter


class TimeFilter(Filter):
    """Forwards a record only if at least `seconds` passed (by the records' own
    capture times) since the last record forwarded from the same namespace.
    A record captured before that one (the wall clock was set back) is
    forwarded and restarts the interval, rather than silencing the namespace
    until the clock catches up. `seconds = 0` forwards every record: it is
    Acme's `TimeFilter(time_delta=0)`, which configs ported from Acme use to
    turn throttling off."""

    def __init__(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ValueError(
                f"seconds must be a number >= 0, got {seconds!r}; "
                "use 0 to forward every record, or the shortest interval between a namespace's records (e.g. 0.5)"
            )
        self.seconds = float(seconds)
        self._last: dict[str, float] = {}

    def apply(self, event: Event) -> list[Event]:
        last = self._last.get(event.namespace)
        if last is not None and 0 <= event.time - last < self.seconds:
            return []
        self._last[event.namespace] = event.time
        return [event]
