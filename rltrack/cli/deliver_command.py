"""`rltrack deliver URI`: the trackers fed from storage, not from every node (`run.delivery = "from-storage"`).

With `run.delivery = "from-storage"` a node's agent only writes the local
files and mirrors the run to `run.storage` (rltrack.trackers.storage); the
trackers the config names are delivered by this command, on one machine (or
a few, each owning a share of the runs: `--share K/N` takes the runs whose
path hashes to K modulo N). Each run then has one writer per tracker, and a
tracker server's connections do not grow with the nodes.

Each round pulls what storage holds into a local copy (rltrack.runs.storage_root:
the journals only grow, segment by segment, so the copy's cursors stay
valid) and runs, per run, writer and tracker, the `DeliveryWorker` the
agent runs, from a cursor kept in the copy; a tracker's run is ended once
every journal of the run ends with its `end` line. A tracker that fails is
retried with backoff, its backlog in the copy's journals.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path
from typing import Any

from rltrack.cli.sync_command import read_run_config
from rltrack.delivery.construct import build_backend, tracker_view
from rltrack.delivery.registry import RemoteBackend, RunContext, backend_class, is_backend_name
from rltrack.delivery.cursor import DeliveryBusy
from rltrack.delivery.run_end import merge_into_report_file, tracker_status
from rltrack.delivery.worker import DeliveryWorker
from rltrack.core.report import Report
from rltrack.journal import ended_with, journal_files
from rltrack.runs.index import cache_folder
from rltrack.runs.storage_root import pull
from rltrack.training.config import load_config

#: Seconds between rounds (each pulls storage and delivers what is new).
ROUND_EVERY = 5.0


class Deliverer:
    """Delivers the from-storage runs under `uri` (this deliverer's `share`) to their trackers, round after round."""

    def __init__(self, uri: str, share: tuple[int, int] = (0, 1), config_file: Path | None = None) -> None:
        self.uri = uri
        self.share = share
        self.settings = load_config(config_file)["backends"] if config_file is not None else None
        self.copy = cache_folder("deliver", f"{uri} {share[0]}/{share[1]}")
        #: Per (run directory, tracker): the backend (one tracker run) and its workers, one per writer.
        self.open: dict[tuple[Path, str], tuple[RemoteBackend, dict[str | None, DeliveryWorker]]] = {}
        self.finished: set[tuple[Path, str]] = set()

    def round(self) -> bool:
        """Pulls storage and delivers what it holds; True when the trackers have all of it (and the runs that ended are ended there)."""
        done = True
        for run_dir in pull(self.uri, self.copy, self._owns):
            config = read_run_config(run_dir)
            if config.get("run", {}).get("delivery") != "from-storage":
                continue
            backends = self.settings or config.get("backends", {})
            for name in backends.get("use", []):
                if is_backend_name(name) and issubclass(backend_class(name), RemoteBackend) and (run_dir, name) not in self.finished:
                    done = self._deliver(run_dir, name, backends.get(name, {}), config) and done
        return done

    def _owns(self, run: str) -> bool:
        """Whether the run at `run` (its path under the URI) is in this deliverer's share."""
        count, index = self.share[1], self.share[0]
        return int.from_bytes(hashlib.sha256(run.encode()).digest()[:8], "big") % count == index

    def _deliver(self, run_dir: Path, name: str, settings: dict[str, Any], config: dict[str, Any]) -> bool:
        """Steps the run's workers for tracker `name` as far as the copy's journals go; True once the tracker has it all."""
        key = (run_dir, name)
        if key not in self.open:
            backend = build_backend(name, settings, str(run_dir / "total_config.py"))
            assert isinstance(backend, RemoteBackend)
            backend.open(RunContext(run_dir, run_dir.name, config, Report()))
            self.open[key] = (backend, {})
        backend, workers = self.open[key]
        journals = journal_files(run_dir)
        ends = {writer: ended_with(path) for writer, path in journals.items()}
        for writer in journals:
            if writer not in workers:
                try:
                    workers[writer] = DeliveryWorker(backend, run_dir, writer, lock_wait=0, shared=list(workers.values()), view=tracker_view(settings))
                except DeliveryBusy:  # another deliverer has this share: it delivers the run
                    return False
                for other in workers.values():
                    other.shared = list(workers.values())
        complete = all(status is not None for status in ends.values())
        for writer, worker in workers.items():
            if complete and not worker.journal_complete:
                worker.end(tracker_status(str(ends[writer])))
            while worker.step():
                pass
        if all(worker.done for worker in workers.values()):
            merge_into_report_file(run_dir, backend.run.report.as_dict(), [name])
            self.finished.add(key)
            del self.open[key]
            return True
        for writer, worker in workers.items():
            if worker.last_error and worker.failing_since is not None:
                print(f"rltrack deliver: {run_dir.name} -> {name}: {worker.last_error} (retried)", file=sys.stderr)
        return all(worker.caught_up() for worker in workers.values())


def deliver(uri: str, share: tuple[int, int] = (0, 1), config_file: Path | None = None, once: bool = False) -> int:
    """Delivers round after round (every `ROUND_EVERY` seconds); `once`: one
    round, exit status 0 when the trackers have everything storage held."""
    deliverer = Deliverer(uri, share, config_file)
    while True:
        done = deliverer.round()
        if once:
            return 0 if done else 1
        time.sleep(ROUND_EVERY)


def parse_share(text: str) -> tuple[int, int]:
    """`K/N` -> (K, N), 0 <= K < N."""
    index, _, count = text.partition("/")
    try:
        k, n = int(index), int(count)
    except ValueError:
        k, n = -1, 0
    if not 0 <= k < n:
        raise ValueError(f"--share {text!r} must be K/N with 0 <= K < N, e.g. --share 0/2 and --share 1/2 on two machines")
    return k, n


