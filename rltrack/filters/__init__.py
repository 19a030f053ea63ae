"""Shared filters between adapters and backends, and their names in config files."""

from rltrack.filters.aggregate import AggregateFilter
from rltrack.filters.base import Filter, FilterChain
from rltrack.filters.keys import KeyFilter
from rltrack.filters.none import NoneFilter
from rltrack.filters.smoothing import SmoothingFilter
from rltrack.filters.throttle import TimeFilter

#: `type = "..."` in a config's `[[filters]]` table -> the class it builds.
FILTER_TYPES: dict[str, type[Filter]] = {
    "none": NoneFilter,
    "smoothing": SmoothingFilter,
    "aggregate": AggregateFilter,
    "time": TimeFilter,
    "keys": KeyFilter,
}

__all__ = [
    "FILTER_TYPES",
    "AggregateFilter",
    "Filter",
    "FilterChain",
    "KeyFilter",
    "NoneFilter",
    "SmoothingFilter",
    "TimeFilter",
]
