"""An append-only file of whole records that a full disk never tears nor doubles.

The local files (text logs, progress.csv, TensorBoard) are written by the
agent from the journal. Python's buffered files lose or tear data on a full
disk: a `TextIOWrapper` drops the text it was handing down when the write
below it fails, and a `BufferedWriter` leaves the part of a record the disk
took in the file. A `RecordFile` keeps what is appended in memory until
`flush`, which writes it with `os.write`; a write the disk refuses or cuts
short is cut back (`ftruncate`, which needs no free space) to the size the
file had after the last flush that succeeded, always the end of a whole
record, and everything stays in memory for the next `flush`. So the file
holds every record once, whole, in order, as soon as the disk takes it, and
`append` never touches the disk (the file is created at the first `flush`).
"""

from __future__ import annotations

import os
from pathlib import Path


class RecordFile:
    """Records appended to `path` (created at the first `flush` if it does not exist)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._pending: list[bytes] = []
        self._size = 0  # the file's length after the last flush that succeeded: the end of a whole record

    def append(self, record: bytes) -> None:
        self._pending.append(record)

    def write(self, text: str) -> None:
        """Appends `text` as one record in UTF-8 (text with no UTF-8 form, a
        lone surrogate, raises UnicodeEncodeError and appends nothing: the
        deliveries leave such text out before, see rltrack.core.refusals)."""
        self._pending.append(text.encode("utf-8"))

    def mark(self) -> int:
        """Where the records appended from now on start (see `undo`)."""
        return len(self._pending)

    def undo(self, mark: int) -> None:
        """Forgets the records appended since `mark` (a write that failed half-way)."""
        del self._pending[mark:]

    def flush(self) -> None:
        """Writes what was appended since the last flush, all of it or (raising
        the OSError) none of it: what the disk took is cut back, and kept in memory.
        The file exists once a flush has succeeded, even with nothing appended."""
        fd = self._open()
        if not self._pending:
            return
        data = b"".join(self._pending)
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
        except BaseException:
            if written:
                os.ftruncate(fd, self._size)
            raise
        self._size += written
        self._pending = []

    def discard(self) -> None:
        """Forgets what was appended and not flushed (its writer keeps it in another form)."""
        self._pending = []

    def replace(self, data: bytes) -> None:
        """Makes `data` the whole file in one rename (a temporary file beside
        it; on failure, removed, and the file as it was), forgetting what was
        appended and not flushed."""
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                written = 0
                while written < len(data):
                    written += os.write(fd, data[written:])
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if self._fd is not None:  # the old file's: appends go to the new one
            os.close(self._fd)
            self._fd = None
        self._pending = []

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            self._size = os.fstat(self._fd).st_size
        return self._fd

    def close(self) -> None:
        """Flushes (raising if the disk still refuses: the records stay for another
        `close`, which opens the file again), then closes."""
        try:
            self.flush()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
