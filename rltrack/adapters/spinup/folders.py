"""SpinningUp's output dirs, read by `rltrack runs` where they lie:
`progress.txt` (tab-separated, a header row) and `config.json`, as
SpinningUp's `EpochLogger` (and rltrack's drop-in, rltrack.adapters.spinup.logger)
writes them.

The declaration (`LIBRARY.folders`) names this reader; the run database
(rltrack.runs.readers_foreign) imports it when it looks for runs. Columns keep
their names, in the namespace the drop-in files them under (`AverageEpRet` ->
collector, `LossPi` -> learner: `rows.namespace_of`), with their canonical
twins through the shared vocabulary; `TotalEnvInteracts` and `Epoch` are the
`env_steps` and `epoch` axes. The config's scalars are the hyperparameters;
host and status are "unknown".
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from rltrack.adapters.spinup.rows import STAT_PREFIXES, STEP_COLUMNS, namespace_of
from rltrack.runs.readers_foreign import UNKNOWN, columns, earliest_mtime, json_dict, task
from rltrack.runs.records import RunInfo, Sample, scalar_hparams

#: A statistic's prefix on a column (`AverageEpRet`), before the stored key it summarises.
_STATISTIC = re.compile(rf"^({'|'.join(STAT_PREFIXES)})(?=[A-Z])")


class SpinupFormat:
    """A SpinningUp output dir: `progress.txt` (tab-separated, header row) and `config.json`."""

    name = "spinup"

    def detect(self, path: Path) -> bool:
        return (path / "progress.txt").is_file() and (path / "config.json").is_file()

    def info(self, path: Path) -> RunInfo:
        config = json_dict(path / "config.json")
        files = [path / "config.json", path / "progress.txt"]
        return RunInfo(path, self.name, self.name, task(path, config), UNKNOWN, "", earliest_mtime(files), UNKNOWN, config, scalar_hparams(config))

    def samples(self, path: Path) -> list[Sample]:
        with (path / "progress.txt").open(newline="", encoding="utf-8") as f:
            rows = [{(column or "").strip(): cell for column, cell in row.items()} for row in csv.DictReader(f, delimiter="\t")]
        return columns(rows, STEP_COLUMNS, _namespace, steps_are_metrics=False)

    def signature_files(self, path: Path) -> list[Path]:
        return [path / "config.json", path / "progress.txt"]


def _namespace(column: str) -> tuple[str, str]:
    """A column's namespace by the drop-in's rule (`AverageEpRet` -> collector, `LossPi` -> learner), and the column."""
    return namespace_of(_STATISTIC.sub("", column)), column


#: The reader `rltrack runs` uses (`LIBRARY.folders`).
FORMAT = SpinupFormat()
