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

from pathlib import Path
from typing import Any, Callable, TypeVar

from rltrack.core.events import NUMERIC_KINDS, Event
from rltrack.core.report import Report

Id = TypeVar("Id")

REFUSED = "refused"
LONE_SURROGATE = "a lone surrogate (no UTF-8 form)"
#: The event times every store takes as a date: from 1970 to about the year 5000 (seconds since 1970).
LATEST_TIME = 1e11


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
    if utf8("".join(event.data)) if event.kind in NUMERIC_KINDS else _encodable(event.data):  # numbers: only keys hold text
        return event, []
    data, left_out = {}, []
    for key, value in event.data.items():
        if _encodable(key) and _encodable(value):
            data[key] = value
        else:
            left_out.append(f"{event.kind} value: {LONE_SURROGATE} in its key or value")
    return (event.derive(data) if data else None), left_out


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
