"""Keeps or drops keys by regular expression, like Acme's KeyFilter."""

from __future__ import annotations

from rltrack.core.events import Event
from rltrack.filters.base import Filter, KeyMatcher


class KeyFilter(Filter):
    """`keep`: only keys matching it pass; `drop`: keys matching it are removed
    (applied after `keep`). Both use `re.search`. A record left empty is dropped."""

    def __init__(self, keep: str | None = None, drop: str | None = None) -> None:
        if keep is None and drop is None:
            raise ValueError("KeyFilter needs keep=<regex>, drop=<regex> or both")
        self._keep = KeyMatcher("keep", keep) if keep is not None else None
        self._drop = KeyMatcher("drop", drop) if drop is not None else None

    def apply(self, event: Event) -> list[Event]:
        data = {
            key: value
            for key, value in event.data.items()
            if (self._keep is None or self._keep(key)) and (self._drop is None or not self._drop(key))
        }
        if len(data) == len(event.data):
            return [event]
        return [event.derive(data)] if data else []
