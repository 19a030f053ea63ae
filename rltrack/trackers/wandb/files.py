"""What a W&B run's offline `.wandb` files hold: the history rows counted as
wandb-core appends them (`HistoryFile`), and the rows of a run's earlier
files once no process writes them any more (`rows_in_files`).

The W&B backend (rltrack.trackers.wandb.backend) moves its cursor only over rows
these files hold, and skips, on a resume, the rows they already hold: this is
how every row reaches W&B exactly once across crashes. The format is read
here, not through wandb's own reader, so that counting follows the file as
it grows, record by record, and stops at a damaged record.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from pathlib import Path

from rltrack.core import posix

#: Before counting the rows of a W&B run's earlier files, how long to wait for
#: whoever still writes them: the wandb-core of a process that crashed or just
#: finished goes on appending what it had received for a while.
WRITER_WAIT = 60.0
#: Where open files cannot be listed (no /proc), a file is taken as still
#: written until it has not changed for this long.
QUIET = 2.0


def rows_in_files(paths: list[Path]) -> int:
    """The rows a W&B run's earlier files hold, once their writers are done
    (counting earlier would log again the rows still on their way in)."""
    deadline = time.monotonic() + WRITER_WAIT
    while paths and being_written(paths) and time.monotonic() < deadline:
        time.sleep(0.1)
    return sum(HistoryFile(path).count() for path in paths)


def being_written(paths: list[Path]) -> bool:
    """Whether another process holds one of `paths` open (Linux's /proc), or
    where that cannot be seen, whether one changed in the last `QUIET` seconds."""
    targets = {str(path.resolve()) for path in paths}
    proc = posix.PROC
    if not (proc / "self" / "fd").is_dir():
        return any(time.time() - path.stat().st_mtime < QUIET for path in paths if path.is_file())
    for pid in os.listdir(proc):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            if any(os.readlink(fd.path) in targets for fd in os.scandir(proc / pid / "fd")):
                return True
        except OSError:  # gone meanwhile, or another user's process (wandb-core runs as the user who ran training)
            continue
    return False


class HistoryFile:
    """Counts the history rows of a W&B run file as W&B appends to it. The
    file is LevelDB's log format after a 7-byte header: 32 KiB blocks of
    `crc32 u32 | length u16 | type u8 | data` records (types full 1, first 2,
    middle 3, last 4) holding `wandb_internal_pb2.Record` messages. A record
    not yet complete is read again next time, and so are zeros in the last
    block (W&B writes whole blocks and fills them in later); a damaged record
    (a killed process) ends the count for good: W&B holds nothing after it."""

    BLOCK = 32768
    HEADER = struct.Struct("<IHB")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = 0
        self._pos = 7  # the first byte not yet counted
        self._payload = b""  # the fragments so far of a record split over blocks
        self._damaged = False

    def count(self) -> int:
        """The rows the file holds now (0 while it does not exist)."""
        if self._damaged or not self.path.is_file():
            return self.rows
        with self.path.open("rb") as f:
            f.seek(self._pos)
            data = f.read()
        from wandb.proto import wandb_internal_pb2

        at = 0
        while True:
            pos = self._pos + at
            left = self.BLOCK - pos % self.BLOCK
            if left < self.HEADER.size:  # a block's zero-filled tail
                at += left
                continue
            if at + self.HEADER.size > len(data):
                break
            crc, length, kind = self.HEADER.unpack_from(data, at)
            if length == 0 and kind == 0:  # zeros: padding once W&B has moved on to the next block, else not yet written
                if at + left >= len(data):
                    break
                at += left
                continue
            body = data[at + self.HEADER.size : at + self.HEADER.size + length]
            if len(body) < length:
                break
            if zlib.crc32(body, zlib.crc32(bytes([kind]))) != crc:
                self._damaged = True
                break
            at += self.HEADER.size + length
            self._payload = body if kind in (1, 2) else self._payload + body
            if kind in (1, 4):
                record = wandb_internal_pb2.Record()
                record.ParseFromString(self._payload)
                self.rows += record.WhichOneof("record_type") == "history"
        self._pos += at
        return self.rows
