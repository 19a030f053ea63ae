"""Reads a W&B run file (`run-<id>.wandb`) back into protobuf records, for tests.

Why this exists: wandb 0.31 ships no Python reader for the file its offline
mode writes, and the W&B tests must check what really landed there, not what
was handed to `run.log`. The format (design.md §4) is LevelDB's log format
with a 7-byte file header: 32 KiB blocks of records, each `crc32 u32 | length
u16 | type u8 | data`, a record that does not fit being split into
first/middle/last pieces, and a block tail shorter than a header left as
zeros. The reassembled payloads are `wandb_internal_pb2.Record` messages.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any, Iterator

from wandb.proto import wandb_internal_pb2
from waiting import wait_until

FILE_HEADER = struct.Struct("<4sHB")  # b":W&B", magic 0xBEE1, version 0
MAGIC = 0xBEE1
BLOCK = 32768
RECORD_HEADER = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def payloads(path: Path) -> Iterator[bytes]:
    """The whole payloads of a `.wandb` file, in order, checksums verified;
    none while its writer has not written the whole file header yet."""
    data = Path(path).read_bytes()
    if len(data) < FILE_HEADER.size:
        return
    ident, magic, version = FILE_HEADER.unpack_from(data)
    if ident != b":W&B" or magic != MAGIC or version != 0:
        raise ValueError(f"{path}: not a W&B run file (header {data[:7]!r})")
    pos = FILE_HEADER.size
    pieces: list[bytes] = []
    while pos + RECORD_HEADER.size <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < RECORD_HEADER.size:
            pos += left_in_block  # zero padding at the end of a block
            continue
        crc, length, kind = RECORD_HEADER.unpack_from(data, pos)
        if length == 0 and kind == 0:  # zeros: the rest of the block is padding
            pos += left_in_block
            continue
        body = data[pos + RECORD_HEADER.size : pos + RECORD_HEADER.size + length]
        if len(body) < length:
            return  # the writer is still at it: the last record is not all there yet
        if zlib.crc32(body, zlib.crc32(bytes([kind]))) != crc:
            raise ValueError(f"{path}: bad checksum at byte {pos}")
        pos += RECORD_HEADER.size + length
        if kind == FULL:
            yield body
        elif kind == FIRST:
            pieces = [body]
        elif kind == MIDDLE:
            pieces.append(body)
        elif kind == LAST:
            yield b"".join([*pieces, body])
            pieces = []
        else:
            raise ValueError(f"{path}: unknown record type {kind} at byte {pos}")


def records(path: Path) -> Iterator[wandb_internal_pb2.Record]:
    for payload in payloads(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        yield record


def _item_key(item: Any) -> str:
    return "/".join(item.nested_key) if item.nested_key else item.key


def history(path: Path) -> list[dict[str, Any]]:
    """Every history row as a dict of key -> decoded JSON value (`_step`,
    `_runtime` and `_timestamp` included, as wandb adds them)."""
    return [
        {_item_key(item): json.loads(item.value_json) for item in record.history.item}
        for record in records(path)
        if record.WhichOneof("record_type") == "history"
    ]


def config(path: Path) -> dict[str, Any]:
    """The run's config as last updated: the run record's, then each config record's changes."""
    merged: dict[str, Any] = {}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        updates = record.run.config.update if kind == "run" else record.config.update if kind == "config" else []
        for item in updates:
            merged[_item_key(item)] = json.loads(item.value_json)
    return merged


def of_type(path: Path, record_type: str) -> list[Any]:
    """The `record_type` payloads (e.g. "artifact", "exit", "metric", "run")."""
    return [getattr(r, record_type) for r in records(path) if r.WhichOneof("record_type") == record_type]


def wait_complete(path: Path, timeout: float = 30.0) -> Path:
    """Waits until the file holds its run's `exit` record. `run.finish()` can
    return before wandb-core has written the file out (seen with the first run
    of a process: 7 bytes right after finish, everything a moment later)."""

    def complete() -> bool:
        try:
            return any(r.WhichOneof("record_type") == "exit" for r in records(path))
        except ValueError:  # a block caught half-written; read again
            return False

    wait_until(complete, timeout, f"{path} to hold its exit record")
    return Path(path)


def run_files(run_dir: Path) -> list[Path]:
    """The complete `.wandb` files of the offline runs under `<run_dir>/wandb`, oldest first."""
    return [wait_complete(p) for p in sorted(Path(run_dir).glob("wandb/offline-run-*/run-*.wandb"))]
