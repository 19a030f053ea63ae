"""What of a batch of journal lines a tracker is sent, by the rules it declares.

A tracker declares what it takes as data (`rltrack.trackers.remote.Rules`);
this module applies those rules, once, for every tracker, before anything is
sent: an event of a kind the tracker takes none of is left out and counted
as dropped ("histogram events: mlflow takes no histogram"); a value no store
encodes (rltrack.core.refusals.encodable: a lone surrogate, a time that
names no date, a step beyond 64 bits) and a value whose name the tracker
refuses (an empty one, or one no file can be named after, for a kind it
stores in a file named after the key) are left out and counted as refused,
with their place in the journal (by the worker, once the batch is taken).
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from rltrack.core.events import Event
from rltrack.core.refusals import encodable
from rltrack.journal import Entry
from rltrack.trackers.remote import EventId, Rules

#: UTF-8 bytes of a file name (Linux, macOS); of a key's last part in a file named after it, what is left
#: beside `_<step>_<id>.<ext>` (a 20-digit step, W&B's 20 hex digits).
MAX_FILE_NAME = 255
MAX_LAST_PART = MAX_FILE_NAME - len("_" + "9" * 20 + "_" + "f" * 20 + ".html")


def _refused_name(tag: str, rules: Rules, in_file: bool) -> str | None:
    """Why a tracker with `rules` refuses a value named `tag` (`in_file`: stored in a file named after it)."""
    if not tag and rules.named:
        return "an empty name (the tracker requires one)"
    if not in_file:
        return None
    if "\x00" in tag:
        return "a NUL byte in its name (the tracker names the value's file after it)"
    *folders, last = (len(part.encode("utf-8")) for part in tag.split("/"))
    if last > MAX_LAST_PART or any(size > MAX_FILE_NAME for size in folders):
        return f"a name too long for the tracker's file of the value (a part over {MAX_FILE_NAME} UTF-8 bytes, or {MAX_LAST_PART} for the last)"
    return None


def sendable(event: Event, rules: Rules) -> tuple[Event | None, list[str]]:
    """`event` without what a tracker with `rules` is known in advance to
    refuse (None: all of it), and what was left out, one `what: why` text per
    value or event (delivery counts each as refused, with its place in the
    journal): for every tracker no lone surrogate (rltrack.core.refusals),
    then the names its rules refuse."""
    event, left_out = encodable(event)
    if event is None or event.kind in ("hparams", "artifact") or not (rules.named or rules.file_named):
        return event, left_out
    in_file = event.kind in rules.file_named
    if not in_file and (event.namespace or all(event.data)):  # no empty name: nothing more to look at
        return event, left_out
    refused = {key: why for key in event.data if (why := _refused_name(event.tag(key), rules, in_file))}
    if not refused:
        return event, left_out
    data = {key: value for key, value in event.data.items() if key not in refused}
    return (event.derive(data) if data else None), left_out + [f"{event.kind} value: {why}" for why in refused.values()]


class Outgoing(NamedTuple):
    """A batch as the tracker is sent it: its events, their ids, where their
    lines start (for thinning's windows); what was left out as refused, with
    why and where, and the number dropped for each reason."""

    events: list[Event]
    ids: list[EventId]
    starts: list[int]
    refusals: list[tuple[str, EventId]]
    dropped: Counter[str]


def outgoing(entries: list[Entry], ends: list[int], start: int, writer: str | None, rules: Rules, tracker: str) -> Outgoing:
    """The events among `entries` (read from `writer`'s journal from byte
    `start`, `ends[i]` the offset after `entries[i]`) as tracker `tracker`, with `rules`, takes them."""
    batch = Outgoing([], [], [], [], Counter())
    for entry, end, begin in zip(entries, ends, [start, *ends]):
        if type(entry) is not Event:
            continue
        event_id = EventId(writer, end)
        event, left_out = sendable(entry, rules)  # refused by every store first: the same poison counted the same way everywhere
        batch.refusals.extend((why, event_id) for why in left_out)
        if event is not None and event.kind not in rules.kinds:
            batch.dropped[f"{event.kind} events: {tracker} takes no {event.kind} (kept in the journal)"] += 1
        elif event is not None:
            batch.events.append(event)
            batch.ids.append(event_id)
            batch.starts.append(begin)
    return batch
