"""`progress.csv`: every scalar of a run, one row per table, no key ever dropped.

Ray Tune's and Acme's CSV writers fix the columns at the first row, so keys
that first appear later (evaluation metrics) are lost. Here a new column makes
the file be rewritten once with the wider header, the old rows left blank in
it, as SB3's CSV writer does. A file that exists already (a resumed run)
keeps its header and rows, and new rows are appended.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import IO, Any


class GrowingCsv:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: list[str] = []
        if path.is_file() and path.stat().st_size:
            with path.open(newline="", encoding="utf-8") as f:
                self.columns = next(csv.reader(f), [])
            with path.open("rb+") as f:  # a killed writer may have left half a row
                f.seek(-1, 2)
                if f.read(1) != b"\n":
                    f.write(b"\n")
            self._file: IO[str] = path.open("a", newline="", encoding="utf-8")
        else:
            self._file = path.open("w", newline="", encoding="utf-8")
        self._known = set(self.columns)  # membership per key per row: a list made this quadratic

    def write_row(self, row: dict[str, Any]) -> None:
        new = [key for key in row if key not in self._known]
        if new:
            self._widen(new)
        csv.writer(self._file).writerow(["" if row.get(c) is None else row[c] for c in self.columns])

    def _widen(self, new: list[str]) -> None:
        self._file.close()
        old_rows = []
        if self.columns:
            with self.path.open(newline="", encoding="utf-8") as f:
                old_rows = list(csv.reader(f))[1:]
        self.columns += new
        self._known.update(new)
        self._file = self.path.open("w", newline="", encoding="utf-8")
        writer = csv.writer(self._file)
        writer.writerow(self.columns)
        writer.writerows(r + [""] * len(new) for r in old_rows)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
