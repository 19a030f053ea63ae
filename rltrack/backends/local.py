"""The serial run directory that DI-engine and LightZero users know.

    log/<namespace>/<namespace>_logger.txt   a table per dump, plus text records
    log/serial/events.out.tfevents.*         TensorBoard, tag "<namespace>/<key>"
    progress.csv                             every scalar, late keys kept

The rest of the directory (journal, meta.json, total_config.py, ckpt/) is
written by `rltrack.rundir` for every run, whichever backends are chosen.
"""

from __future__ import annotations

import time
from typing import IO

from rltrack.backends.base import Backend, RunContext
from rltrack.backends.csvfile import GrowingCsv
from rltrack.backends.tables import TABLE_SECONDS, LatestValues, Pending, format_table
from rltrack.backends.tfevents import EventFileWriter
from rltrack.events import NUMERIC_KINDS, Event
from rltrack.rundir import safe_filename

DEFAULT_NAMESPACE = "main"


class LocalBackend(Backend):
    name = "local"

    def open(self, run: RunContext) -> None:
        super().open(run)
        self._log_dir = run.run_dir / "log"
        self._text_logs: dict[str, IO[str]] = {}
        self._tables = LatestValues(min_seconds=TABLE_SECONDS)
        self._row = LatestValues()
        self._tb = EventFileWriter(self._log_dir / "serial")
        self._csv = GrowingCsv(run.run_dir / "progress.csv")

    def write(self, events: list[Event]) -> None:
        for event in events:
            self._tb.write(event)
            if event.kind in NUMERIC_KINDS:
                self._numeric(event)
            elif event.kind == "text":
                stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event.time))
                self._text_log(event.namespace).writelines(f"[{stamp}] {k}: {v}\n" for k, v in event.data.items())

    def _numeric(self, event: Event) -> None:
        numbers = {k: v for k, v in event.data.items() if v is not None}
        for namespace, pending in self._tables.add(event):
            self._write_table(namespace, pending)
        flat = Event(time=event.time, data={event.tag(k): v for k, v in numbers.items()}, steps=event.steps)
        for _, pending in self._row.add(flat):
            self._write_row(pending)

    def _write_table(self, namespace: str, pending: Pending) -> None:
        title = namespace or DEFAULT_NAMESPACE
        self._text_log(namespace).write(f"{pending.heading()}\n{format_table(title, pending.values)}\n")

    def _write_row(self, pending: Pending) -> None:
        self._csv.write_row({"time": round(pending.time, 6), **pending.steps, **pending.values})

    def _text_log(self, namespace: str) -> IO[str]:
        """`log/<ns>/<ns>_logger.txt`, `<ns>` made one safe path component:
        namespaces like `evaluation/env_runners` or `../x` stay inside `log/`."""
        name = safe_filename(namespace or DEFAULT_NAMESPACE)
        log = self._text_logs.get(name)
        if log is None:
            folder = self._log_dir / name
            folder.mkdir(parents=True, exist_ok=True)
            log = self._text_logs[name] = (folder / f"{name}_logger.txt").open("a", encoding="utf-8")
        return log

    def dump(self) -> None:
        for namespace, pending in self._tables.take_all():
            self._write_table(namespace, pending)
        for _, pending in self._row.take_all():
            self._write_row(pending)

    def flush(self) -> None:
        self._tb.flush()
        self._csv.flush()
        for log in self._text_logs.values():
            log.flush()

    def close(self, status: str) -> None:
        self.dump()
        self._tb.close()
        self._csv.close()
        for log in self._text_logs.values():
            log.close()
