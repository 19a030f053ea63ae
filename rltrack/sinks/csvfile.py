"""`progress.csv`: every scalar of a run, one row per table, no key ever dropped.

Ray Tune's and Acme's CSV writers fix the columns at the first row, so keys
that first appear later (evaluation metrics) are lost. Here a new column makes
the file be rewritten once with the wider header, the old rows left blank in
it, as SB3's CSV writer does. A file that exists already (a resumed run)
keeps its header and rows, and new rows are appended.

Rows reach the disk at `flush`, whole or not at all: appended through a
`RecordFile` (rltrack.sinks.records), or, when the header grew, in a new file
renamed over the old one. On a full disk the rows stay in memory and the next
`flush` writes them; none is doubled, torn or lost.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import orjson

from rltrack.sinks.records import RecordFile


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
        self._known = set(self.columns)  # membership per key per row: a list made this quadratic
        self._header = len(self.columns)  # the columns of the header on disk
        self._rows: list[list[Any]] = []  # rows not on disk yet, each as wide as the columns were when it came
        self._file = RecordFile(path)
        self._text = io.StringIO(newline="")  # the csv module's line of a row that is not all numbers
        self._text_writer = csv.writer(self._text)

    def write_row(self, row: dict[str, Any]) -> None:
        """A row of `row`'s values under their columns; a column it lacks, or a
        None, is left empty (csv writes None as ""). Written at `flush`."""
        if not self._known.issuperset(row):
            new = [key for key in row if key not in self._known]
            self.columns += new
            self._known.update(new)
        self._rows.append(list(map(row.get, self.columns)))

    def mark(self) -> tuple[int, int]:
        """The columns and rows so far (see `undo`)."""
        return len(self.columns), len(self._rows)

    def undo(self, mark: tuple[int, int]) -> None:
        """Forgets the columns and rows added since `mark` (a write that failed half-way)."""
        columns, rows = mark
        if columns < len(self.columns):
            del self.columns[columns:]
            self._known = set(self.columns)
        del self._rows[rows:]

    def flush(self) -> None:
        """Writes the rows since the last flush, or raises the OSError and keeps them for the next."""
        if self._header != len(self.columns):
            self._rewrite()
        elif self._rows:
            for values in self._rows:
                self._file.write(self._line(values))
            try:
                self._file.flush()
            except BaseException:
                self._file.discard()  # kept here as rows: a wider header may come before the next flush
                raise
        else:
            self._file.flush()  # the file exists, rows or none
        self._rows = []

    def _rewrite(self) -> None:
        """The whole file with the wider header: the rows on disk, then the new ones."""
        old_rows = []
        if self._header:
            with self.path.open(newline="", encoding="utf-8") as f:
                old_rows = list(csv.reader(f))[1:]
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        writer.writerow(self.columns)
        width = len(self.columns)
        writer.writerows(row + [""] * (width - len(row)) for row in old_rows)
        text.write("".join(self._line(values) for values in self._rows))
        self._file.replace(text.getvalue().encode("utf-8"))
        self._header = width

    def _line(self, values: list[Any]) -> str:
        """One row's line, as wide as the columns are now."""
        values = values + [None] * (len(self.columns) - len(values))
        line = _numbers_line(values)
        if line:
            return line
        self._text.seek(0)
        self._text.truncate()
        self._text_writer.writerow(values)
        return self._text.getvalue()

    def close(self) -> None:
        self.flush()
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
