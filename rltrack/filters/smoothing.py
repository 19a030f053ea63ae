"""Exponential smoothing of noisy keys, emitted beside the raw values."""

from __future__ import annotations

from math import isfinite

from rltrack.core.events import Event
from rltrack.filters.base import Filter, KeyMatcher, as_float

WARMUPS = ("acme", "debias")


class SmoothingFilter(Filter):
    """For each key matching `regex` (re.search), adds `<key>_smoothed`.

    `warmup="acme"` (default) is the recipe commonly paired with Acme loggers:
    per key `s = c = 0`, then for each value `x`: `s = x*(1-c) + s*c`,
    `c = 0.9*c + 0.1*coeff`; the first smoothed value is `x` itself and the
    weight of history grows towards `coeff`.
    `warmup="debias"` is Adam-style bias correction: `m = coeff*m + (1-coeff)*x`,
    emitted as `m / (1 - coeff**n)` after `n` values.
    State is per namespace and key. None, NaN and infinite values are passed on
    but do not enter the state, so one bad value does not poison the average.
    """

    def __init__(self, regex: str, coeff: float = 0.99, warmup: str = "acme") -> None:
        self._matches = KeyMatcher("regex", regex)
        if isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or not 0 <= coeff < 1:
            raise ValueError(f"coeff must be a number in [0, 1), got {coeff!r}")
        if warmup not in WARMUPS:
            raise ValueError(f"warmup must be one of {', '.join(WARMUPS)}, got {warmup!r}")
        self.coeff = float(coeff)
        self.warmup = warmup
        self._state: dict[str, dict[str, list[float]]] = {}  # namespace -> key -> [a, b] (see `_update`)

    def apply(self, event: Event) -> list[Event]:
        data = event.data
        keys = self._matches.among(data)
        if not keys:
            return [event]
        state = self._state.get(event.namespace)
        if state is None:
            state = self._state[event.namespace] = {}
        out = dict(data)  # `<key>_smoothed` added after the record's keys (in place if it is one of them)
        smoothed = False
        for key in keys:
            value = data[key]
            if type(value) is not float:  # floats, most values, without a call
                value = as_float(value)
                if value is None:
                    continue
            if isfinite(value):
                slot = state.get(key)
                if slot is None:
                    slot = state[key] = [0.0, 0.0]
                out[f"{key}_smoothed"] = self._update(slot, value)
                smoothed = True
        if not smoothed:
            return [event]
        return [event.derive(out)]

    def _update(self, slot: list[float], x: float) -> float:
        """The next smoothed value; `slot` ([s, c] or [m, n]) is updated in place."""
        a, b = slot
        if self.warmup == "acme":
            slot[0] = s = x * (1 - b) + a * b
            slot[1] = 0.9 * b + 0.1 * self.coeff
            return s
        slot[0] = m = self.coeff * a + (1 - self.coeff) * x
        slot[1] = n = b + 1
        return m / (1 - self.coeff**n)
