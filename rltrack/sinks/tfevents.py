"""Writes TensorBoard event files without TensorFlow, tensorboardX or a queue.

tensorboardX's `add_scalar` pushes one protobuf per scalar through a 10-slot
multiprocessing queue (~84 us a scalar, blocking when full). Here one
`Event` proto carries one `Summary` with every value of a record, encoded by
hand (the few fields TensorBoard reads) and appended as a TFRecord from the
agent's thread, through a `RecordFile` (rltrack.sinks.records): a full disk
never leaves half a record in the file. TensorBoard's own `EventAccumulator` reads the files back.
"""

from __future__ import annotations

import functools
import math
import socket
import struct
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from rltrack.core.events import NUMERIC_KINDS, Event
from rltrack.sinks.records import RecordFile
from rltrack.frameworks.stages import is_throughput, with_return_mean
from rltrack.frameworks.tensorboard_tags import THROUGHPUT_HALF, TWIN_AXES, twin_prefix

#: `tb_axes` names -> the step axis their tags are plotted against, as DI-engine
#: writes each value twice: `<namespace>_iter/<key>` and `<namespace>_step/<key>`.
TB_AXES = TWIN_AXES
#: The tag prefix of records without a namespace when `tb_axes` is set.
NO_NAMESPACE = "main"
#: Keys DI-engine leaves out of its `<namespace>_<name>/` tags: the counters
#: that are the axis itself (the evaluator's `train_iter`, the collector's
#: `total_envstep_count` against env steps), which would plot as y = x.
TB_AXES_SKIP = {"iter": frozenset({"train_iter"}), "step": frozenset({"train_iter", "total_envstep_count"})}


def check_tb_axes(value: Any) -> tuple[str, ...] | None:
    """A valid `tb_axes` setting as a tuple (None: the primary step axis only),
    else a ValueError naming the value and what is allowed."""
    if value is None:
        return None
    allowed = ", ".join(f'"{name}" ({axis})' for name, axis in TB_AXES.items())
    if (
        not isinstance(value, (list, tuple))
        or not value
        or any(not isinstance(v, str) or v not in TB_AXES for v in value)
        or len(set(value)) != len(value)
    ):
        raise ValueError(
            f"tb_axes = {value!r} is not allowed: give a non-empty list of distinct axis names out of {allowed}, "
            'e.g. tb_axes = ["iter", "step"], or leave it out for the primary step axis only'
        )
    return tuple(value)


def _without(data: dict[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in keys}


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c_python(data: bytes) -> int:
    """CRC-32C in pure Python (~50 us a record): the fallback when google-crc32c is missing."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:  # a C implementation, a dependency of rltrack; ~40x faster on the pipeline thread
    from google_crc32c import value as crc32c
except ImportError:  # pragma: no cover - only when installed without dependencies
    crc32c = crc32c_python


def _masked_crc(data: bytes) -> bytes:
    crc = crc32c(data)
    return _UINT32.pack((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


_UINT32, _UINT64, _DOUBLE = struct.Struct("<I"), struct.Struct("<Q"), struct.Struct("<d")
#: The one-byte varints, built once: most varints (field keys, lengths) are one of these.
_ONE_BYTE = [bytes([n]) for n in range(0x80)]


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 two's complement, as protobuf encodes negatives
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
#: An Event's wall_time (field 1, 64-bit) and the key of its step (field 2, varint).
_EVENT_HEAD = struct.Struct("<BdB")


def _summary_field(summary: bytes) -> bytes:
    """`Event.summary` (field 5) holding these encoded `Summary.Value`s."""
    return _field_bytes(5, summary)


_FLOAT32_MAX = 3.4028234663852886e38


def _float32(value: float) -> float:
    """`value`, or +-inf beyond float32's range: struct refuses to pack those
    as "f" (and float() a huge int); float32 has +-inf."""
    if abs(value) > _FLOAT32_MAX:
        return math.inf if value > 0 else -math.inf
    return value


@functools.lru_cache(maxsize=4096)
def _scalar_prefix(tag: str) -> bytes:
    """A `Summary.Value` with a `simple_value` up to its 4 float bytes. Tags
    repeat every record, so their encoding is kept instead of redone."""
    head = _field_bytes(1, tag.encode()) + b"\x15"  # tag, then simple_value's key (field 2, 32-bit)
    return _varint(1 << 3 | 2) + _varint(len(head) + 4) + head


class _ScalarLayout:
    """The `Summary` of one value per tag, for a fixed tuple of tags: one
    `struct.Struct` holds every tag's prefix bytes and float slot, so a
    record's summary is one `pack` call instead of one encoding per value."""

    def __init__(self, tags: Sequence[str]) -> None:
        prefixes = [_scalar_prefix(tag) for tag in tags]
        size = sum(len(p) + 4 for p in prefixes)
        head = _summary_field(bytes(size))[:-size]  # the summary's length is the layout's: framed once
        self._struct = struct.Struct(f"<{len(head)}s" + "".join(f"{len(p)}sf" for p in prefixes))
        self._args: list[Any] = [head, *(part for p in prefixes for part in (p, 0.0))]

    def pack(self, values: Iterable[float]) -> bytes:
        """`Event.summary` with these values, framed (see `_summary_field`).
        Raises struct.error or OverflowError for None and values beyond float32."""
        args = self._args  # reused: a writer is used by one thread
        args[2::2] = values
        return self._struct.pack(*args)


def _histogram_value(tag: str, values: Sequence[float], bins: int = 30) -> bytes:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return b""
    lo, hi = min(finite), max(finite)
    width = (hi - lo) / bins or 1.0
    counts = [0.0] * bins
    for v in finite:
        x = (v - lo) / width  # NaN when the range overflows a double (inf / inf): last bucket, no crash
        counts[int(x) if x < bins - 1 else bins - 1] += 1
    limits = [lo + width * (i + 1) for i in range(bins)]
    limits[-1] = max(limits[-1], hi)  # rounding may leave the largest value above lo + width * bins
    histo = (
        b"\x09" + struct.pack("<d", lo)
        + b"\x11" + struct.pack("<d", hi)
        + b"\x19" + struct.pack("<d", len(finite))
        + b"\x21" + struct.pack("<d", _sum(finite))
        + b"\x29" + struct.pack("<d", _sum([v * v for v in finite]))
        + _field_bytes(6, struct.pack(f"<{bins}d", *limits))
        + _field_bytes(7, struct.pack(f"<{bins}d", *counts))
    )
    return _field_bytes(1, _field_bytes(1, tag.encode()) + _field_bytes(5, histo))


def _sum(values: list[float]) -> float:
    """Exact sum, or +-inf where `math.fsum` raises on an intermediate overflow."""
    try:
        return math.fsum(values)
    except OverflowError:
        return sum(values)


@functools.lru_cache(maxsize=256)
def _record_head(length: int) -> bytes:
    """A TFRecord's length and its masked CRC: records of one layout share a length."""
    header = _UINT64.pack(length)
    return header + _masked_crc(header)


#: Scalar layouts kept per writer (see `EventFileWriter._layout`).
MAX_LAYOUTS = 4096


class EventFileWriter:
    """One `events.out.tfevents.<time>.<host>` file in `logdir`. `tb_axes`
    (see `check_tb_axes`): write each value once per named axis, tagged
    `<stage>_<name>/<key>` at the event's step on that axis (DI-engine's
    tags, by the stage the value is filed under: SB3's `rollout/ep_rew_mean`
    as `collector_iter/rollout/ep_rew_mean`); an event on
    none of those axes keeps `<namespace>/<key>` at its primary step.
    Against a named axis the keys of `TB_AXES_SKIP` are left out, and a
    replay buffer's throughput table (`rltrack.frameworks.stages.is_throughput`) is
    written once, as `<namespace>_sec/<key>` at the table's number in this
    file (0, 1, 2, ...), and an evaluator's `reward_mean` also as
    `eval_episode_return_mean` (`rltrack.frameworks.stages.with_return_mean`), as DI-engine does."""

    def __init__(self, logdir: Path, tb_axes: Sequence[str] | None = None) -> None:
        self._axes = [(name, TB_AXES[name], TB_AXES_SKIP[name]) for name in check_tb_axes(tb_axes) or ()]
        self._periods: dict[str, int] = {}  # throughput tables written so far, per namespace
        self._layouts: dict[tuple[str, tuple[str, ...]], _ScalarLayout] = {}
        logdir.mkdir(parents=True, exist_ok=True)
        self._file = RecordFile(self._create(logdir / f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"))
        self._record(time.time(), 0, _field_bytes(3, b"brain.Event:2"))  # file_version

    def _create(self, path: Path) -> Path:
        """A new empty file, never an existing one: two writers started in the same
        second in one directory (runs sharing a TensorBoard logdir) would
        otherwise interleave their records in one file. The second gets `.1`."""
        for attempt in range(1000):
            self.path = path.with_name(f"{path.name}.{attempt}") if attempt else path
            try:
                self.path.open("xb").close()
                return self.path
            except FileExistsError:
                continue
        raise FileExistsError(f"no free event file name like {path} after 1000 attempts")

    def write(self, event: Event) -> None:
        """Scalars and histograms of an event: tagged `<namespace>/<key>` at its
        primary step, or once per `tb_axes` axis the event has."""
        if event.kind not in NUMERIC_KINDS and event.kind != "histogram":
            return
        data = event.data
        if self._axes and event.kind in NUMERIC_KINDS and is_throughput(event.namespace, data):
            period = self._periods.get(event.namespace, 0)
            self._periods[event.namespace] = period + 1
            self.scalars(event.time, period, twin_prefix(event.namespace, THROUGHPUT_HALF), data)
            return
        filed, stage = event.filed_data() if self._axes else data, event.filed_under
        if self._axes and event.kind in NUMERIC_KINDS:
            filed = with_return_mean(stage, filed)
        placements = self._axes and [
            (twin_prefix(stage or NO_NAMESPACE, name), event.steps[axis], filed if skip.isdisjoint(filed) else _without(filed, skip))
            for name, axis, skip in self._axes
            if axis in event.steps
        ]
        if not placements:
            placements = [(f"{event.namespace}/" if event.namespace else "", event.primary_step or 0, data)]
        for prefix, step, values in placements:
            if not values:
                continue
            if event.kind == "histogram":
                self.histograms(event.time, step, ((prefix + k, v) for k, v in values.items()))
            else:
                self.scalars(event.time, step, prefix, values)

    def scalars(self, wall_time: float, step: int, prefix: str, values: dict[str, float | None]) -> None:
        """One event of every value but None, tagged `prefix + key`."""
        try:
            summary = self._layout(prefix, tuple(values)).pack(values.values())
        except (struct.error, OverflowError):  # a None (skipped), or beyond float32: the rare case
            values = {key: _float32(value) for key, value in values.items() if value is not None}
            summary = self._layout(prefix, tuple(values)).pack(values.values())
        if values:
            self._record(wall_time, step, summary)

    def _layout(self, prefix: str, keys: tuple[str, ...]) -> _ScalarLayout:
        """The layout of these keys' tags, kept per key tuple (records repeat
        theirs); at most `MAX_LAYOUTS` are kept, so keys invented forever cost
        time, not memory."""
        layout = self._layouts.get((prefix, keys))
        if layout is None:
            layout = _ScalarLayout([prefix + key for key in keys])
            if len(self._layouts) < MAX_LAYOUTS:
                self._layouts[prefix, keys] = layout
        return layout

    def histograms(self, wall_time: float, step: int, values: Iterable[tuple[str, Sequence[float]]]) -> None:
        summary = b"".join(_histogram_value(tag, v) for tag, v in values)
        if summary:
            self._record(wall_time, step, _summary_field(summary))

    def _record(self, wall_time: float, step: int, fields: bytes) -> None:
        """Appends an `Event` as a TFRecord: its wall_time and step, then `fields`,
        the rest of it already encoded (a file_version, or a summary as
        `_summary_field` frames it)."""
        if not _INT64_MIN <= step <= _INT64_MAX:  # Event.step is an int64: a larger varint corrupts the file for readers
            step = min(max(step, _INT64_MIN), _INT64_MAX)
        data = b"".join((_EVENT_HEAD.pack(0x09, wall_time, 0x10), _varint(step), fields))
        self._file.append(b"".join((_record_head(len(data)), data, _masked_crc(data))))

    def mark(self) -> tuple[int, dict[str, int]]:
        """What is written so far (see `undo`)."""
        return self._file.mark(), dict(self._periods)

    def undo(self, mark: tuple[int, dict[str, int]]) -> None:
        """Forgets what was written since `mark` (a write that failed half-way)."""
        self._file.undo(mark[0])
        self._periods = mark[1]

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
