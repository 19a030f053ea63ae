"""Exponential smoothing of noisy keys, emitted beside the raw values."""

from __future__ import annotations

import math

from rltrack.events import Event
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
        self._state: dict[tuple[str, str], tuple[float, float]] = {}

    def apply(self, event: Event) -> list[Event]:
        smoothed = {}
        data = event.data
        for key in self._matches.among(data):
            value = data[key]
            if type(value) is not float:  # floats, most values, without a call
                value = as_float(value)
            if value is None or not math.isfinite(value):
                continue
            smoothed[f"{key}_smoothed"] = self._update((event.namespace, key), value)
        if not smoothed:
            return [event]
        return [event.derive({**data, **smoothed})]

    def _update(self, slot: tuple[str, str], x: float) -> float:
        a, b = self._state.get(slot, (0.0, 0.0))
        if self.warmup == "acme":
            s, c = x * (1 - b) + a * b, 0.9 * b + 0.1 * self.coeff
            self._state[slot] = (s, c)
            return s
        m, n = self.coeff * a + (1 - self.coeff) * x, b + 1
        self._state[slot] = (m, n)
        return m / (1 - self.coeff**n)
