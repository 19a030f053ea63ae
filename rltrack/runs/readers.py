"""Which directories are runs, and reading them: rltrack's own, and the foreign formats.

A `RunFormat` recognises a directory (`detect`), describes it (`info`), reads
its values (`samples`) and names the files whose change means the run changed
(`signature_files`, what the index compares to decide a refresh). rltrack's
own format is here; the formats of other tools are in
`rltrack.runs.readers_foreign` and the registered libraries' own (each
`Library.folders`). `formats()` is the order they are tried in:
rltrack first (its run directories also hold `progress.csv`, `total_config.py`
and `log/serial`, which would otherwise look like SB3 or DI-engine dirs).

`find_runs(root)` walks a runs root and yields every run directory in it,
without descending into a run, into hidden directories, or through symlinks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator, Protocol

from rltrack.core.events import Event
from rltrack.journal import journal_files, parse_line, read_journal
from rltrack.runs.records import (
    RunInfo,
    Sample,
    config_literal,
    event_samples,
    scalar_hparams,
)

#: How deep under the root runs are looked for (Tune nests `<experiment>/<trial>`).
MAX_DEPTH = 6
#: Directories inside a runs root that are never runs nor hold runs.
_SKIP_DIRS = frozenset({"__pycache__", "wandb", "mlruns", "mlartifacts", "ckpt", "media", "code", "cursors"})


class RunFormat(Protocol):
    name: str

    def detect(self, path: Path) -> bool: ...

    def info(self, path: Path) -> RunInfo: ...

    def samples(self, path: Path) -> list[Sample]: ...

    def signature_files(self, path: Path) -> list[Path]: ...


class RLTrackFormat:
    """A run directory written by rltrack: meta.json, total_config.py, the journal."""

    name = "rltrack"

    def detect(self, path: Path) -> bool:
        return (path / "meta.json").is_file()

    def info(self, path: Path) -> RunInfo:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        total = _total_config(path)
        config = total.get("config", {}) if isinstance(total.get("config"), dict) else {}
        hparams = total.get("hparams", {}) if isinstance(total.get("hparams"), dict) else {}
        tracked = meta.get("tracked") or {}
        return RunInfo(
            path=path,
            source=_journal_source(path),
            writer=self.name,
            task=str(meta.get("task") or meta.get("name") or path.name),
            host=str(meta.get("host") or "unknown"),
            ip=str(meta.get("ip") or ""),
            start_unix=float(meta.get("start_unix") or (path / "meta.json").stat().st_mtime),
            status=str(meta.get("status") or "unknown"),
            config={"config": config, "hparams": hparams},
            hparams=scalar_hparams(hparams),
            tracked=dict(tracked) if isinstance(tracked, dict) else {},
            backends=[str(b) for b in meta.get("backends") or []],
        )

    def samples(self, path: Path) -> list[Sample]:
        return event_samples(_events(path))

    def signature_files(self, path: Path) -> list[Path]:
        journals = sorted(name for name in os.listdir(path) if name.startswith("journal") and name.endswith(".jsonl"))
        return [path / "meta.json", *(path / name for name in journals)]


def _total_config(path: Path) -> dict:
    config_path = path / "total_config.py"
    if not config_path.is_file():
        return {}
    try:
        return config_literal(config_path)
    except ValueError:  # a damaged config must not hide the run; its values still count
        return {}


#: What a journal line of the plain API holds (orjson writes keys unspaced; quotes inside a string are escaped).
_API_SOURCE = b'"source":"api"'
#: What a control line (`dump`, `counts`, `end`) holds near its start.
_CONTROL = b'"control":'


def _journal_source(path: Path) -> str:
    """The framework of the run's first adapter event (by time, across writers); "plain" for the plain API.

    Reading every event of a plain run to learn that none comes from an adapter
    would double what opening a run costs; lines that say `"source":"api"` (and
    control lines) are passed over unparsed."""
    first: list[Event] = []
    for journal in journal_files(path).values():
        with journal.open("rb") as f:
            for line in f:
                if _API_SOURCE in line or _CONTROL in line[:32] or not line.strip():
                    continue
                try:
                    entry = parse_line(line)
                except (KeyError, ValueError, TypeError, AttributeError):  # a torn or damaged line, as read_journal skips it
                    continue
                if type(entry) is Event and entry.source != "api":
                    first.append(entry)
                    break
    return min(first, key=lambda event: event.time).source if first else "plain"


def _events(path: Path) -> Iterator[Event]:
    """The run's events through `read_journal`; none when it has no journal yet."""
    try:
        yield from read_journal(path)
    except FileNotFoundError:
        return


def formats() -> tuple[RunFormat, ...]:
    from rltrack.runs.readers_foreign import foreign_formats

    return (RLTrackFormat(), *foreign_formats())


def format_of(path: Path) -> RunFormat | None:
    """The format of the run directory `path`, or None when it is not a run."""
    for run_format in formats():
        if run_format.detect(path):
            return run_format
    return None


def find_runs(root: Path) -> Iterator[tuple[Path, str, RunFormat]]:
    """Every run directory under `root` (sorted, depth-first): its path, its path
    relative to `root` (with `/`), its format."""
    all_formats = formats()

    def walk(directory: Path, relative: str, depth: int) -> Iterator[tuple[Path, str, RunFormat]]:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if entry.name.startswith(".") or entry.name in _SKIP_DIRS or not entry.is_dir(follow_symlinks=False):
                continue
            path = directory / entry.name
            below = f"{relative}{entry.name}"
            found = next((f for f in all_formats if f.detect(path)), None)
            if found is not None:
                yield path, below, found
            elif depth < MAX_DEPTH:
                yield from walk(path, below + "/", depth + 1)

    yield from walk(root, "", 1)
