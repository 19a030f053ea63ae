"""Drops keys whose value is None, as Acme's NoneFilter does."""

from __future__ import annotations

from rltrack.core.events import Event
from rltrack.filters.base import Filter


class NoneFilter(Filter):
    """Removes `None` values; a record left with no keys is dropped."""

    def apply(self, event: Event) -> list[Event]:
        if None not in event.data.values():  # values are ints, floats and None here (normalised)
            return [event]
        data = {key: value for key, value in event.data.items() if value is not None}
        return [event.derive(data)] if data else []
