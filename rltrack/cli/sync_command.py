"""`rltrack sync`: what a run's trackers did not receive, delivered afterwards.

A tracker that was down, slow or cut off by a crash keeps its backlog in the
run's journal, behind its cursor (`cursors/<backend>.json`). `sync` runs the
same `DeliveryWorker` the agent runs, from that cursor, in the foreground, until the tracker has
everything, then ends the tracker's run with the status in `meta.json` (or
in the journal's `end` line, which the agent writes into meta.json). A
tracker the run never used has no cursor, so `--to <backend>` replays the
whole run into it. Settings come from `--config` or else from the run's own
config (`total_config.py`). The counts go into the run's `report.json`.

A cursor records the store it delivered to (`RemoteBackend.target`: the
tracking URI or directory, and the project or experiment). Settings that
name another store (`--config shared.toml` with another `tracking_uri`, a
trackio `dir`, a W&B `project`) replay the whole run there, with a cursor and
a tracker run of its own (`cursors/<backend>~<hash of the store>.json`), so
that a replay into either store again sends nothing twice.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import socket
import sys
import threading
from pathlib import Path
from typing import IO, Any

from rltrack.delivery.registry import RemoteBackend, RunContext, backend_class, backend_types, is_backend_name
from rltrack.training.config import load_config
from rltrack.delivery.construct import build_backend, tracker_view
from rltrack.delivery.cursor import LOCK_WAIT, Cursor, DeliveryBusy
from rltrack.delivery.run_end import merge_into_report_file, tracker_status
from rltrack.delivery.worker import DeliveryWorker
from rltrack.journal import JOURNAL_NAME, end_torn_tail, ended_with, journal_files, journal_path
from rltrack.core.report import SHOWN_REFUSED, Report

ENDED = ("finished", "failed", "killed", "crashed")
PROGRESS_EVERY = 0.25  # seconds between progress bar updates
#: Seconds `rltrack sync` keeps retrying a tracker that fails (the agent's retry after a run's end, RLTRACK_AGENT_RETRY, is as long).
DEFAULT_TIMEOUT = 300.0
BAR_WIDTH = 30


class SyncError(Exception):
    """Why a run cannot be synced, worded for the user."""


def sync(
    run_dir: Path, to: list[str] | None = None, config_file: Path | None = None, force: bool = False, out: IO[str] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> bool:  # fmt: skip
    """Delivers the journal of `run_dir` to the trackers `to` (default: the
    run's own trackers), with progress on `out` (default stderr). A tracker
    that has refused every batch for `timeout` seconds is left there (None:
    retried until it answers; one that takes batches, however slowly, is
    never cut off), with a line on `out` saying what is pending. Returns True
    when every tracker has everything."""
    out = out or sys.stderr
    meta = _read_meta(run_dir)
    journals = journal_files(run_dir)
    if not journals:
        raise SyncError(f"{run_dir} has no {JOURNAL_NAME}: there is nothing to deliver")
    status = _final_status(run_dir, meta, force)
    run_config = read_run_config(run_dir)
    if config_file is not None:
        settings, where = load_config(config_file)["backends"], str(config_file)
    else:
        settings, where = run_config.get("backends", {}), str(run_dir / "total_config.py")
    names = list(dict.fromkeys(to or [n for n in meta.get("backends", []) if is_backend_name(n) and _is_tracker(n)]))
    if not names:
        print(f"rltrack: {run_dir} was sent to no tracker; to replay it into one, pass --to mlflow (or wandb, neptune)", file=out)
        return True
    for name in names:
        if not is_backend_name(name):
            raise SyncError(f"--to {name}: no such backend; backends: {', '.join(backend_types())}")
        if not _is_tracker(name):
            raise SyncError(f"--to {name}: the {name} backend writes during the run and has nothing to sync; sync delivers to trackers such as mlflow")
    report = Report()  # this sync's counts; added to report.json at the end
    for path in journals.values():  # the writers are gone (see _final_status): a torn tail will never be completed
        if end_torn_tail(path) == "cut":
            report.count("torn", f"{path.name}: the last line was cut short by a crash and is removed", section="journal")
            print(f"rltrack: {path.name} ended in a line cut short by a crash; it is removed", file=out)
    context = RunContext(run_dir=run_dir, name=meta.get("name", run_dir.name), config=run_config, report=report)
    complete = True
    started: list[str] = []
    try:
        for name in names:
            backend = build_backend(name, settings.get(name, {}), where)
            assert isinstance(backend, RemoteBackend)
            cursor = _cursor_key(run_dir, name, backend.target(context), list(journals))
            backend.open(context)
            started.append(name)
            for index, writer in enumerate(journals):  # one backend object: one tracker run for all writers
                worker = _worker(backend, run_dir, writer, index == len(journals) - 1, out, tracker_view(settings.get(name, {})), cursor)
                complete = _deliver(worker, status, out, timeout) and complete
    finally:
        merge_into_report_file(run_dir, report.as_dict(), started)
    return complete


def _worker(
    backend: RemoteBackend, run_dir: Path, writer: str | None, last: bool, out: IO[str], view: tuple[float, str] | None, cursor: str
) -> DeliveryWorker:  # fmt: skip
    """The delivery of `writer`'s journal to `backend` (its cursor named
    `cursor`, "": the tracker's own); the tracker's run ends after the `last`
    journal. Another process delivering it (the agent, finishing a crashed
    run) is waited for while it advances."""

    def waiting() -> None:
        print(f"{_shown(backend, writer)}: another process (the agent, finishing this run) is delivering it; waiting while it advances "
              f"(at most {LOCK_WAIT:.0f} s without progress), then sending what it left", file=out)  # fmt: skip

    try:
        return DeliveryWorker(backend, run_dir, writer, close_at_end=last, waiting=waiting, view=view, cursor_name=cursor or None)
    except DeliveryBusy as exc:
        raise SyncError(f"{backend.name}: {exc}") from None


def _deliver(worker: DeliveryWorker, status: str, out: IO[str], timeout: float | None) -> bool:
    """Runs `worker` to the end of its journal on a thread of its own,
    drawing a progress bar meanwhile, until the journal is delivered or the
    tracker has been failing for `timeout` seconds."""
    backend, run_dir = worker.backend, worker.run_dir
    total = worker.journal.stat().st_size
    if worker.cursor.offset >= total:
        print(f"{backend.name}: nothing pending ({worker.cursor.target or 'the store'} holds the whole run)", file=out)
    thread = threading.Thread(target=worker.run_until_caught_up, args=(status, timeout), name=f"rltrack-sync-{backend.name}", daemon=True)
    thread.start()
    bar = _ProgressBar(_shown(backend, worker.writer), total, out)
    while thread.is_alive():
        bar.show(worker.cursor.offset, f"  (retrying; last error: {worker.last_error})" if worker.errors else "")
        thread.join(PROGRESS_EVERY)
    bar.show(worker.cursor.offset)
    bar.end()
    if worker.last_error:
        print(f"{backend.name}: {worker.errors} failed attempts; last error: {worker.last_error}", file=out)
    if worker.refused:
        print(f"{backend.name}: refused {len(worker.refused)} values, left out (they stay in the journal; see docs/refused-values.md):", file=out)
        for text in worker.refused[:SHOWN_REFUSED]:
            print(f"  {text}", file=out)
        if len(worker.refused) > SHOWN_REFUSED:
            print(f"  ... and {len(worker.refused) - SHOWN_REFUSED} more in report.json ({backend.name}.refused)", file=out)
    if not worker.caught_up() and worker.fix is not None:
        print(f"{backend.name}: stopped with {worker.pending_bytes():,} bytes of the journal pending: retrying cannot help; {worker.fix}, "
              f"then run `rltrack sync {run_dir} --to {backend.name}` again", file=out)  # fmt: skip
    elif not worker.caught_up():
        print(
            f"{backend.name}: stopped with {worker.pending_bytes():,} bytes of the journal pending"
            + (f" (still failing after {timeout:g} s)" if timeout is not None else "")
            + f"; run `rltrack sync {run_dir} --to {backend.name}` again once it answers (`--timeout inf` retries without a limit)",
            file=out,
        )
    return worker.caught_up()


def _shown(backend: RemoteBackend, writer: str | None) -> str:
    """The tracker as sync's lines name it: `mlflow`, or `mlflow@<writer>` for one of several writers' journals."""
    return backend.name if writer is None else f"{backend.name}@{writer}"


class _ProgressBar:
    """`mlflow [#########.....]  60%  1.2/2.0 MB` on one line, redrawn in place."""

    def __init__(self, name: str, total: int, out: IO[str]) -> None:
        self.name = name
        self.total = total
        self.out = out
        self._width = 0

    def show(self, done: int, note: str = "") -> None:
        fraction = min(1.0, done / self.total) if self.total else 1.0
        filled = int(fraction * BAR_WIDTH)
        line = (
            f"{self.name} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {fraction:4.0%}  "
            f"{done / 1e6:.1f}/{self.total / 1e6:.1f} MB{note}"
        )
        self.out.write("\r" + line.ljust(self._width))
        self.out.flush()
        self._width = len(line)

    def end(self) -> None:
        self.out.write("\n")
        self.out.flush()


def _cursor_key(run_dir: Path, name: str, target: str, writers: list[str | None]) -> str:
    """"" (the tracker's own cursor) while the run's deliveries to `name` went to
    `target` or nowhere yet; `<name>~<hash>` for another store."""
    recorded = {Cursor(run_dir, name, writer).target for writer in writers} - {""}
    if not target or not recorded or target in recorded:
        return ""
    return f"{name}~{hashlib.sha1(target.encode()).hexdigest()[:8]}"


def _is_tracker(name: str) -> bool:
    try:
        return issubclass(backend_class(name), RemoteBackend)
    except ImportError as exc:
        raise SyncError(f"backend {name!r} cannot be loaded: {exc}") from None


def _read_meta(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "meta.json"
    if not path.is_file():
        raise SyncError(f"{run_dir} is not a run directory (no meta.json)")
    meta: dict[str, Any] = json.loads(path.read_text())
    return meta


def _final_status(run_dir: Path, meta: dict[str, Any], force: bool) -> str:
    """The status the tracker's run ends with: meta.json's, or the `end` line
    of the journal of the writer that keeps meta.json. A run still marked running is
    refused while its process may be alive (it is delivering itself, and two
    workers on one cursor would send twice); once that process is gone, the
    run crashed, which trackers know as failed."""
    status = meta.get("status")
    if status not in ENDED:  # the agent may not have marked meta.json yet: the journal's end line says
        status = ended_with(journal_path(run_dir, meta.get("worker"))) or status
    if status in ENDED:
        return tracker_status(str(status))
    if not force and _may_be_alive(meta):
        raise SyncError(
            f"{run_dir} is still running (pid {meta.get('pid')} on {meta.get('host')}) and delivers its own data; "
            "sync it after it ends, or pass --force if that process is not this run any more"
        )
    return "failed"


def _may_be_alive(meta: dict[str, Any]) -> bool:
    if meta.get("host") != socket.gethostname():
        return True  # another machine's process cannot be checked from here
    try:
        os.kill(int(meta["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """The config the run was made with, from `total_config.py` (a Python
    literal, read without executing anything)."""
    path = run_dir / "total_config.py"
    if not path.is_file():
        return {}
    try:
        total = ast.literal_eval(path.read_text(encoding="utf-8"))
    except (ValueError, SyntaxError) as exc:
        raise SyncError(f"{path} is not a Python literal ({exc}); pass the settings with --config FILE") from None
    config = total.get("config", {}) if isinstance(total, dict) else {}
    return config if isinstance(config, dict) else {}
