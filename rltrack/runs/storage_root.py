"""Runs in storage (what the agent mirrored there, see rltrack.trackers.storage)
rebuilt as run directories: `rltrack pull URI [DIR]`, and `--root <URI>` of
`rltrack runs/plot/report/export`, which pull into the user's cache
(`cache_folder("storage", URI)`) and read the copy like any runs root, its index beside it.

A run in storage is a folder holding `meta.json` or journal segments (the
layout of rltrack.journal.layout); anything else under the URI (Tune's own
trial folders, checkpoints of other tools) is left alone. Pulling again
fetches only what changed: a file whose size or time changed, and the
journal segments past those already joined (`.rltrack-pull.json` in the
destination remembers them).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from rltrack.core.atomic_file import write_atomic
from rltrack.core.storage import Entry, Storage, is_uri
from rltrack.journal import End, ended_with, journal_path, parse_line
from rltrack.journal.layout import JOURNAL_FOLDER, Segment, chain, journal_name, parse_segment
from rltrack.runs.index import cache_folder

#: What a destination remembers of the last pull: per run, the files' (size, mtime) and the segments joined per writer.
MANIFEST = ".rltrack-pull.json"


class PullError(Exception):
    """Storage that cannot be read; the message says which and why."""


def local_root(root: str | Path) -> Path:
    """A runs root to read: a local directory as it is; a storage URI pulled into the user's cache."""
    if not is_uri(str(root)):
        return Path(root)
    folder = cache_folder("storage", str(root))
    pull(str(root), folder, prune=True)
    return folder


def pull(uri: str, into: Path, select: Callable[[str], bool] = lambda run: True, prune: bool = False) -> list[Path]:
    """Rebuilds every run under `uri` in `into` (at its path under `uri`; a
    URI that is itself a run, at its last name) that `select` takes (by its
    path under `uri`); returns their directories. `prune` (a copy rltrack
    keeps, never a user's folder): runs pulled before that storage no longer
    holds are removed from `into` too."""
    try:
        storage = Storage(uri)
        entries = list(storage.entries())
    except ImportError:
        raise
    except Exception as exc:
        raise PullError(f"cannot read storage {uri}: {type(exc).__name__}: {exc}") from None
    runs = _runs(entries)
    into.mkdir(parents=True, exist_ok=True)
    manifest_path = into / MANIFEST
    manifest: dict[str, Any] = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    pulled = []

    def local_name(run: str) -> str:
        return run or uri.rstrip("/").rpartition("/")[2].partition("?")[0]

    for gone in [run for run in manifest if prune and run not in runs]:
        shutil.rmtree(into / local_name(gone), ignore_errors=True)
        del manifest[gone]
    for run, files in sorted(runs.items()):
        if not select(run):
            continue
        local = into / local_name(run)
        try:
            manifest[run] = _pull_run(storage, run, files, local, manifest.get(run, {}))
        except Exception as exc:
            raise PullError(f"cannot pull {uri} run {run or '.'}: {type(exc).__name__}: {exc}") from None
        pulled.append(local)
    write_atomic(manifest_path, json.dumps(manifest))
    return pulled


def _runs(entries: list[Entry]) -> dict[str, list[Entry]]:
    """The objects of each run (by its path under the URI), each object given to the innermost run holding it."""
    found: set[str] = set()
    for entry in entries:
        parts = entry.path.split("/")
        if parts[-1] == "meta.json":
            found.add("/".join(parts[:-1]))
        for at, part in enumerate(parts):
            if part == JOURNAL_FOLDER and parse_segment("/".join(parts[at:])) is not None:
                found.add("/".join(parts[:at]))
    runs: dict[str, list[Entry]] = {run: [] for run in found}
    for entry in entries:
        holders = [run for run in found if run == "" or entry.path.startswith(run + "/")]
        if holders:
            runs[max(holders, key=len)].append(entry)
    return runs


def _pull_run(storage: Storage, run: str, entries: list[Entry], local: Path, known: dict[str, Any]) -> dict[str, Any]:
    """Brings `local` up to date with the run's objects; returns what it now holds (for the manifest)."""
    prefix = run + "/" if run else ""
    files: dict[str, list[int]] = dict(known.get("files", {}))
    joined: dict[str, list[str]] = dict(known.get("journals", {}))
    segments: dict[str | None, list[Segment]] = {}
    for entry in entries:
        relative = entry.path[len(prefix) :]
        segment = parse_segment(relative)
        if segment is not None:
            segments.setdefault(segment.writer, []).append(segment)
            continue
        stamp = [entry.size, entry.mtime_ns]
        target = local / relative
        if files.get(relative) == stamp and target.is_file():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, storage.get(entry.path))
        files[relative] = stamp
    for writer, pieces in segments.items():
        key = writer or ""
        joined[key] = _join(storage, prefix, chain(pieces), local / journal_name(writer), joined.get(key, []))
    _mark_ended(local)
    return {"files": files, "journals": joined}


def _join(storage: Storage, prefix: str, pieces: list[Segment], journal: Path, done: list[str]) -> list[str]:
    """The writer's journal joined from `pieces`: appending the segments past
    `done` (those already joined) when the file holds exactly them, else written anew."""
    names = [piece.path for piece in pieces]
    held = journal.stat().st_size if journal.is_file() else -1
    start = len(done) if done == names[: len(done)] and held == (pieces[len(done) - 1].last if done else 0) else 0
    journal.parent.mkdir(parents=True, exist_ok=True)
    with journal.open("ab" if start else "wb") as out:
        for piece in pieces[start:]:
            out.write(storage.get(prefix + piece.path))
        out.flush()
        os.fsync(out.fileno())
    return names


def _mark_ended(run_dir: Path) -> None:
    """meta.json as the agent leaves it at the run's end: a copy made before
    the agent marked it (the mirror writes the files as the journal ends)
    still says running while the journal of its writer ends with an `end` line."""
    meta_path = run_dir / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return
    journal = journal_path(run_dir, meta.get("worker"))
    status = ended_with(journal) if meta.get("status") == "running" else None
    if status is None:
        return
    last = journal.read_bytes()[-4096:].rstrip(b"\n").rpartition(b"\n")[2]
    entry = parse_line(last)
    meta["status"] = status
    if isinstance(entry, End):
        meta["end_time"] = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(entry.time))
    write_atomic(meta_path, json.dumps(meta, indent=2) + "\n")
