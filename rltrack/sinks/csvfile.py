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

import orjson


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
        self._writer = csv.writer(self._file)

    def write_row(self, row: dict[str, Any]) -> None:
        """A row of `row`'s values under their columns; a column it lacks, or a
        None, is left empty (csv writes None as "")."""
        if not self._known.issuperset(row):
            self._widen([key for key in row if key not in self._known])
        values = list(map(row.get, self.columns))
        line = _numbers_line(values)
        if line:
            self._file.write(line)
        else:
            self._writer.writerow(values)

    def _widen(self, new: list[str]) -> None:
        self._file.close()
        old_rows = []
        if self.columns:
            with self.path.open(newline="", encoding="utf-8") as f:
                old_rows = list(csv.reader(f))[1:]
        self.columns += new
        self._known.update(new)
        self._file = self.path.open("w", newline="", encoding="utf-8")
        self._writer = csv.writer(self._file)
        self._writer.writerow(self.columns)
        self._writer.writerows(r + [""] * len(new) for r in old_rows)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


_NUMBERS = frozenset((int, float, type(None)))


def _numbers_line(values: list[Any]) -> str:
    """The line `csv.writer` writes for a row of ints, floats and Nones, built
    without it (its per-character quoting scan is most of a row's cost): numbers
    never need quoting, None is written as nothing. orjson writes the numbers
    (a float's repr costs ~1 µs on this Python build); it writes NaN and the
    infinities as null too, so a row with more nulls than Nones is written
    with repr ("nan", "inf", as csv.writer). "" when the csv module must write
    the row (other types, or a lone empty field, which it writes as `""`)."""
    if not _NUMBERS.issuperset(map(type, values)):
        return ""
    try:
        encoded = orjson.dumps(values)
    except orjson.JSONEncodeError:  # an int beyond 64 bits
        encoded = b""
    nones = values.count(None)
    if encoded and encoded.count(b"null") == nones:
        line = (encoded[1:-1].replace(b"null", b"") if nones else encoded[1:-1]).decode()
    else:
        line = ",".join(["" if value is None else repr(value) for value in values])
    return line + "\r\n" if line else ""
