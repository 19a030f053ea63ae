"""SB3's own run folders, read by `rltrack runs` where they lie: what
`configure(folder, ["csv", ...])` writes, a `progress.csv` with `prefix/key`
columns (`rollout/ep_rew_mean`, `time/total_timesteps`, ...).

The declaration (`LIBRARY.folders`) names this reader; the run database
(rltrack.runs.readers_foreign) imports it when it looks for runs. Values keep
their native names (namespace = the part before the first `/`) and get their
canonical twins through the shared vocabulary; `time/total_timesteps` is the
`env_steps` axis and `time/iterations` the `train_iter` one, both kept as
values too. Host and status are "unknown": the file does not say; the start
is the file's last change less the run's `time/time_elapsed`.
"""

from __future__ import annotations

import csv
from pathlib import Path

from rltrack.runs.readers_foreign import UNKNOWN, columns, namespace_and_key, task
from rltrack.runs.records import RunInfo, Sample, as_number


class SB3Format:
    """A folder SB3's `configure(folder, ["csv", ...])` wrote: progress.csv with `prefix/key` columns."""

    name = "sb3"
    STEP_COLUMNS = {"time/total_timesteps": "env_steps", "time/iterations": "train_iter"}

    def detect(self, path: Path) -> bool:
        progress = path / "progress.csv"
        if not progress.is_file() or (path / "result.json").is_file():  # a Tune trial's folder holds a progress.csv too
            return False
        with progress.open(newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), [])
        return any(column.split("/")[0] in ("rollout", "time", "train", "eval") for column in header)

    def info(self, path: Path) -> RunInfo:
        rows = self._rows(path)
        elapsed = max((v for r in rows if (v := as_number(r.get("time/time_elapsed"))) is not None), default=0.0)
        progress = path / "progress.csv"
        return RunInfo(path, self.name, self.name, task(path, {}), UNKNOWN, "", progress.stat().st_mtime - elapsed, UNKNOWN)

    def samples(self, path: Path) -> list[Sample]:
        return columns(self._rows(path), self.STEP_COLUMNS, namespace_and_key, steps_are_metrics=True)

    def signature_files(self, path: Path) -> list[Path]:
        return [path / "progress.csv"]

    @staticmethod
    def _rows(path: Path) -> list[dict[str, str]]:
        with (path / "progress.csv").open(newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))


#: The reader `rltrack runs` uses (`LIBRARY.folders`).
FORMAT = SB3Format()
