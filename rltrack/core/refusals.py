"""Values no store takes, found before a delivery sends them, and how a refused value is counted.

A lone surrogate ("a\\ud800b": half of a UTF-16 pair, which a Python string
may hold and the journal carries as a JSON escape) has no UTF-8 form. Every
store rltrack writes encodes UTF-8 (progress.csv and the text logs,
TensorBoard's protobufs, MLflow's SQLite and HTTP, trackio's orjson, W&B), so
each refused it, the files in the middle of a batch (the rest of the batch
never written) and MLflow and trackio for the whole batch, again and again.
The journal keeps the event as it was written; every delivery (the local
files, each tracker) leaves out the value, or the whole event when its
namespace or a step axis holds one, before sending, and counts it with its
place in the journal (`refused`), so that the rest of the batch goes on.

The same for an event whose time names no date (NaN, ±inf, 1e20: an event
an adapter built itself, `Logger.emit`): MLflow (`int(time * 1000)`:
"cannot convert float NaN to integer"), trackio (a datetime) and the text
logs (`time.localtime`) refused it, MLflow and trackio again and again.
`encodable` leaves the whole event out of every delivery.

The same, decided here once for every delivery, for what an event may
hold that no store takes as it is:

* NaN and ±inf among a histogram's entries: no bin holds them (W&B's and
  trackio's histograms refuse them, the TensorBoard files and Neptune's
  summary left them out without a word). Each is left out of the histogram
  and counted, one `NON_FINITE_ENTRY` per entry, in every sink and tracker;
  the journal keeps them.
* a step beyond 64-bit integers (on any axis): every store's step is an
  int64 (MLflow's, trackio's SQLite, TensorBoard's `Event.step`); the event
  is left out of every delivery, counted, where before MLflow dropped it,
  trackio refused it and the TensorBoard files clamped its step. (A step
  that is no whole number never reaches the journal: `fractional_step`.)

`refused` is also the one way a tracker's own refusals are counted (see
rltrack.trackers.remote and rltrack.delivery.worker): category `refused` of
the delivery's section in report.json, one reason per record, naming the
journal line (the byte offset after it) where the value stays.

`split_refused` is how every delivery (each tracker, each local file
backend) finds the records a store refuses for something in their data:
the batch is sent again in halves down to the refused records, the rest in
journal order.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any, Callable, TypeVar

from rltrack.core.events import NUMERIC_KINDS, Event
from rltrack.core.report import Report

Id = TypeVar("Id")

REFUSED = "refused"
LONE_SURROGATE = "a lone surrogate (no UTF-8 form)"
#: The event times every store takes as a date: from 1970 to about the year 5000 (seconds since 1970).
LATEST_TIME = 1e11


#: The integers every store takes as a step (an int64).
INT64 = (-(2**63), 2**63 - 1)
#: Why a histogram's NaN or ±inf entry is left out (one count per entry).
NON_FINITE_ENTRY = "histogram entry: not finite (NaN, ±inf: no bin holds it)"
#: Why an event with a step beyond 64 bits is left out.
STEP_BEYOND_64_BITS = "a step beyond 64-bit integers (every store's step is an int64)"

#: Refused values a delivery names by their place; beyond, they are counted by reason alone (report.json stays small).
MAX_PLACES = 100


def refused(report: Report, section: str, reason: str, journal: Path | str, offset: int, earlier: int) -> str:
    """Counts a value (or a whole record) that `section` does not deliver,
    with why and where it stays (`earlier`: how many this delivery counted
    before; past `MAX_PLACES` the place is left out); returns the text counted."""
    if earlier < MAX_PLACES:
        text = f"{reason}: {Path(journal).name} line ending at byte {offset}"
    else:
        text = f"{reason}: in {Path(journal).name}, places beyond the first {MAX_PLACES} not listed"
    report.count(REFUSED, text, section=section)
    return text


def utf8(text: str) -> bool:
    """Whether `text` has a UTF-8 form (holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _encodable(value: Any) -> bool:
    """No string inside `value` (a dict's keys and values, a list's items) holds a lone surrogate."""
    if type(value) is str:
        return utf8(value)
    if isinstance(value, dict):
        return all(_encodable(k) and _encodable(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_encodable(v) for v in value)
    return True


def encodable(event: Event) -> tuple[Event | None, list[str]]:
    """`event` without what has no UTF-8 form, and what was left out (as
    `what: reason` texts, one per value or one for the event): the same
    object when nothing is; None when the namespace or a step axis has none
    (the event cannot be named) or its time names no date."""
    if not 0.0 <= event.time < LATEST_TIME:  # NaN fails every comparison
        return None, [f"{event.kind} event: its time {event.time!r} names no date"]
    if not utf8(event.namespace + "".join(event.steps)):  # joined: one test (surrogates never join into a pair)
        return None, [f"{event.kind} event: {LONE_SURROGATE} in its namespace or a step name"]
    if not all(INT64[0] <= step <= INT64[1] for step in event.steps.values()):
        return None, [f"{event.kind} event: {STEP_BEYOND_64_BITS}"]
    if event.kind == "histogram":
        event, left_out = _finite_entries(event)
        if event is None:
            return None, left_out
    else:
        left_out = []
    if utf8("".join(event.data)) if event.kind in NUMERIC_KINDS else _encodable(event.data):  # numbers: only keys hold text
        return event, left_out
    data = {}
    for key, value in event.data.items():
        if _encodable(key) and _encodable(value):
            data[key] = value
        else:
            left_out.append(f"{event.kind} value: {LONE_SURROGATE} in its key or value")
    return (event.derive(data) if data else None), left_out


def _finite_entries(event: Event) -> tuple[Event | None, list[str]]:
    """A histogram event without its NaN and ±inf entries (a key left with
    none is left out), and one `NON_FINITE_ENTRY` per entry left out."""
    data, dropped = {}, 0
    for key, values in event.data.items():
        if isinstance(values, list) and not all(type(v) is not float or math.isfinite(v) for v in values):
            finite = [v for v in values if type(v) is not float or math.isfinite(v)]
            dropped += len(values) - len(finite)
            if finite:
                data[key] = finite
        else:
            data[key] = values
    if not dropped:
        return event, []
    return (event.derive(data) if data else None), [NON_FINITE_ENTRY] * dropped


def fractional_step(axis: str, value: Any) -> str | None:
    """What is wrong with a step that is a number but no whole one (0.25,
    NaN): cut to an integer, values written at 0, 0.25 and 0.5 would all land
    on step 0. `Logger.write` raises it; the pipeline drops such an axis of an
    event an adapter built, counted. None for whole numbers and what is no
    number (the pipeline converts or counts that)."""
    if not isinstance(value, numbers.Real) or isinstance(value, numbers.Integral):
        return None
    if math.isfinite(value) and value == int(value):
        return None
    return (f"step axis {axis!r} = {value!r} is no whole number: every store's step is an integer (values at 0, 0.25 and 0.5 "
            "would all land on step 0); scale the axis to whole numbers (e.g. thousandths) or log the fraction as a value")


def split_refused(
    send: Callable[[list[Event], list[Id]], None], events: list[Event], ids: list[Id],
    refuses: Callable[[Exception], str | None], refusals: list[tuple[str, Id]],
) -> int:  # fmt: skip
    """Sends `events` (`ids[i]` names `events[i]`); when `send` raises what
    `refuses` names as a reason in the data (None: not the data, such as a
    network or a full disk: raised), sends each half again (a store that
    takes a batch takes it whole or not at all, or takes it again without
    doubles), down to the events refused, which are added to `refusals` with
    the reason (their number is returned): one poisoned record costs about
    2·log2(batch) sends, and the rest arrives in journal order."""
    try:
        send(events, ids)
    except Exception as exc:
        reason = refuses(exc)
        if reason is None:
            raise
        if len(events) == 1:
            refusals.append((reason, ids[0]))
            return 1
        half = len(events) // 2
        return split_refused(send, events[:half], ids[:half], refuses, refusals) + split_refused(
            send, events[half:], ids[half:], refuses, refusals
        )
    return 0
