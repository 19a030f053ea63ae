"""What the local files (text logs, progress.csv, TensorBoard) cannot hold, found before they are written.

The training process normalises every value (rltrack.core.values), so its
journal holds numbers in scalar records and lists of numbers in histograms.
A journal written otherwise (an importer, another tool, a line edited by
hand) may hold what the file backends refuse, and did, tried one by one:
a string, list or dict among a record's scalars (`abs()` of a str in
TensorBoard's float32 check), a histogram that is no list of numbers (None,
text, a number alone, an integer beyond a double). Each would stop the
files in the middle of a batch. `writable` leaves such values out before
anything is written, after what no store takes (`encodable`: text with no
UTF-8 form, a time that names no date); rltrack.delivery.files counts each as refused with its
place in the journal. What a sink still refuses is found by splitting the
batch (rltrack.core.refusals.split_refused).
"""

from __future__ import annotations

from typing import Any

from rltrack.core.events import NUMERIC_KINDS, Event
from rltrack.core.refusals import encodable

_NUMBERS = frozenset((int, float, bool, type(None)))
_HISTOGRAM_ITEMS = frozenset((int, float, bool))


def _histogram(value: Any) -> bool:
    """A list of numbers a double can hold (an int beyond one overflows the histogram's sums)."""
    if not isinstance(value, list) or not _HISTOGRAM_ITEMS.issuperset(map(type, value)):
        return False
    return all(abs(v) < 2**1023 for v in value if type(v) is int)


def writable(event: Event) -> tuple[Event | None, list[str]]:
    """`event` without what the local files cannot hold, and what was left
    out (`what: reason` texts, as `encodable`): the same object when nothing
    is; None when nothing is left."""
    event, left_out = encodable(event)
    if event is None:
        return None, left_out
    data = event.data
    if event.kind in NUMERIC_KINDS:
        if _NUMBERS.issuperset(map(type, data.values())):
            return event, left_out
        kept = {key: value for key, value in data.items() if type(value) in _NUMBERS}
        why = "not a number"
    elif event.kind == "histogram":
        kept = {key: value for key, value in data.items() if _histogram(value)}
        why = "not a list of finite-range numbers"
    else:
        return event, left_out
    if len(kept) == len(data):
        return event, left_out
    left_out += [f"{event.kind} value: {why} ({type(value).__name__})" for key, value in data.items() if key not in kept]
    return (event.derive(kept) if kept else None), left_out

