"""A run's layout in storage (see rltrack.core.storage): the contract between
the agent's mirror (rltrack.trackers.storage) and its readers (`rltrack pull`,
`rltrack runs --root <URI>`), documented in docs/storage.md.

    <storage>/<run path>/                   the run's path under run.root, the same under run.storage
        meta.json, total_config.py, ...     the run directory's files, by their relative paths
        ckpt/iteration_<N>.pth.tar ...      (not the journals, cursors/, lock files, hidden temporary files)
        journal/<first>-<last>.jsonl        the journal of the run's only writer (journal.jsonl), in segments
        journal/<writer>/<first>-<last>.jsonl    the journal of writer <writer> (journal.<writer>.jsonl)

A segment holds the journal's bytes from offset `<first>` to `<last>` (whole
lines; both zero-padded to `OFFSET_DIGITS` digits, so names sort by offset).
Its name is fixed by what it holds: writing it again (a retried upload)
replaces the same object. Joining a writer's segments from offset 0 in order
gives its journal back, byte for byte; `chain` picks them.
"""

from __future__ import annotations

import re
from typing import Iterable, NamedTuple

from rltrack.journal import JOURNAL_NAME, WRITER_NAME

JOURNAL_FOLDER = "journal"
OFFSET_DIGITS = 16
_SEGMENT = re.compile(r"(\d{%d})-(\d{%d})\.jsonl" % (OFFSET_DIGITS, OFFSET_DIGITS))
#: Folders of a run directory that stay on the machine that wrote them (delivery cursors).
LOCAL_FOLDERS = frozenset({"cursors"})


class Segment(NamedTuple):
    """One stored piece of a writer's journal: bytes [`first`, `last`) at `path` (relative to the run)."""

    writer: str | None
    first: int
    last: int
    path: str


def segment_path(writer: str | None, first: int, last: int) -> str:
    """Where the journal bytes [first, last) of `writer` (None: the only writer) go, relative to the run."""
    name = f"{first:0{OFFSET_DIGITS}d}-{last:0{OFFSET_DIGITS}d}.jsonl"
    return f"{JOURNAL_FOLDER}/{name}" if writer is None else f"{JOURNAL_FOLDER}/{writer}/{name}"


def parse_segment(path: str) -> Segment | None:
    """The segment at `path` (relative to the run); None for anything else."""
    parts = path.split("/")
    if len(parts) not in (2, 3) or parts[0] != JOURNAL_FOLDER:
        return None
    match = _SEGMENT.fullmatch(parts[-1])
    if match is None or (len(parts) == 3 and not WRITER_NAME.fullmatch(parts[1])):
        return None
    first, last = int(match.group(1)), int(match.group(2))
    return Segment(parts[1] if len(parts) == 3 else None, first, last, path) if first < last else None


def journal_name(writer: str | None) -> str:
    """The local journal file a writer's segments join into."""
    return JOURNAL_NAME if writer is None else f"journal.{writer}.jsonl"


def chain(segments: Iterable[Segment]) -> list[Segment]:
    """The segments that join into the writer's journal, from offset 0 on, in
    order: at each offset the longest segment starting there (a copy made
    before a crash may end earlier than the one written after it); stops at
    the first gap (what follows it has not arrived)."""
    longest: dict[int, Segment] = {}
    for segment in segments:
        if segment.first not in longest or segment.last > longest[segment.first].last:
            longest[segment.first] = segment
    joined: list[Segment] = []
    offset = 0
    while offset in longest:
        joined.append(longest[offset])
        offset = longest[offset].last
    return joined


def mirrored(path: str) -> bool:
    """Whether the run directory's file at `path` (relative, `/`-separated) is
    copied to storage: not a journal (it goes in segments), not a delivery
    cursor or lock, not a hidden temporary file (a checkpoint being written)."""
    parts = path.split("/")
    if parts[0] in LOCAL_FOLDERS or any(part.startswith(".") for part in parts) or path.endswith(".lock"):
        return False
    return not (len(parts) == 1 and parts[0].startswith("journal") and parts[0].endswith(".jsonl"))
