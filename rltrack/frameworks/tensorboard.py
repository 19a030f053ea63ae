"""TensorBoard `Event` protos -> rltrack events: the one translation of what a writer wrote.

The hook on live writers (rltrack.adapters.tensorboard) and the import of
event files written without rltrack (`rltrack import tensorboard`) both feed
`Translator.add(proto, logdir)` with each `Event` proto in the order it was
written, and `Translator.flush()` at the end; both get the same events. The
protos are read by their fields only (TensorBoard's, tensorboardX's and
TensorFlow's classes alike); nothing here imports them.

What becomes what:

* scalars (`simple_value`, or a one-number tensor of the scalars plugin) ->
  `scalars`; consecutive values of one namespace at the same steps are one
  event, so a framework's block (CleanRL's losses of one update, a
  DI-engine stage table) is one record. A value whose key is already in the
  open event starts the next one.
* the namespace and step axis of a tag come from its prefix
  (rltrack.frameworks.tensorboard_tags: `charts/` -> collector at env steps,
  `Loss/` -> learner at train_iter, ...), its canonical (DI-engine) name from
  the vocabulary, added or swapped in per `run.names`; unknown prefixes stay
  the namespace, at axis `step`.
* DI-engine/LightZero's twins `<stage>_iter/<k>` (train_iter) and
  `<stage>_step/<k>` (env steps) -> ONE value `<stage>/<k>` with both axes,
  `{"env_steps": s, "train_iter": i}`, as rltrack's own DI layout writes them
  (a value written only against iterations, such as `total_envstep_count`,
  joins its block at the block's iteration);
* `add_scalars(main, {a: .., b: ..})` (one sub-writer per key, in
  `<logdir>/<main>_<a>` for torch, `<logdir>/<main>/<a>` for tensorboardX)
  -> one event with keys `a`, `b` in `main`'s namespace;
* a writer in another log directory (not an `add_scalars` one) -> its values
  in a namespace named after that directory relative to the first one, keys
  as tagged; the HParams sub-writer of `add_hparams` keeps its metrics' tags;
* text (`add_text`) -> `text`; CleanRL's `hyperparameters` markdown table and
  the HParams plugin's session start -> `hparams` with typed values (`2048`
  an int, `True` a bool, `2.5e-4` a float; the plugin keeps numbers as
  doubles, so an integral one becomes an int);
* histograms -> `histogram`: the proto keeps bucket counts, not the values,
  so each bucket gives its count of values at its centre (at most
  `MAX_HISTOGRAM_VALUES`, scaled down);
* images -> `image` through `save_image` (the caller saves the PNG into the run
  directory), else dropped and counted;
* a step that goes back (a restarted loop) is kept, and counted in the
  report (`tensorboard.kept`).
"""

from __future__ import annotations

import ast
import math
import os
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from rltrack.core.events import Event
from rltrack.core.report import Report
from rltrack.frameworks.canonical import NAME_MODES
from rltrack.frameworks.tensorboard_tags import (
    CANONICAL,
    HPARAMS_PREFIX,
    HPARAMS_SESSION_START,
    HPARAMS_TEXT_TAGS,
    LOGDIR_TAILS,
    PERIOD_AXIS,
    PREFIXES,
    SECONDS_AXIS,
    SECONDS_SUFFIX,
    SPACED_PREFIXES,
    SPACED_SEPARATOR,
    TEXT_SUFFIX,
    THROUGHPUT_HALF,
    TWIN_AXES,
    TWIN_TAG,
    UNKNOWN_AXIS,
)
from rltrack.frameworks.stages import ITER_AXIS, STEP_AXIS

SOURCE = "tensorboard"
#: The report section of the translation's counts.
SECTION = "tensorboard"
#: The most values a histogram's buckets are expanded into.
MAX_HISTOGRAM_VALUES = 1000

#: Saves one image: (namespace, key, step, PNG bytes) -> the image event's data for that key.
SaveImage = Callable[[str, str, int, bytes], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Route:
    """Where one tag's values go: the namespace, the key(s) (native, canonical
    per `run.names`) and the axis the writer's step is on; `twin` is "iter" or
    "step" for one half of a DI-engine twin, None otherwise."""

    namespace: str
    keys: tuple[str, ...]
    axis: str
    twin: str | None = None


def route(tag: str, mode: str = "both") -> Route:
    """The route of a tag written in the first log directory (see the module docstring)."""
    twin = TWIN_TAG.match(tag)
    if twin is not None:
        half = twin["axis"]
        if half == THROUGHPUT_HALF:
            return Route(twin["stage"], (twin["key"],), PERIOD_AXIS)
        return Route(twin["stage"], (twin["key"],), TWIN_AXES[half], half)
    if SPACED_SEPARATOR in tag:
        prefix, _, leaf = tag.partition(SPACED_SEPARATOR)
        namespace, axis = SPACED_PREFIXES.get(prefix.strip(), (prefix.strip(), UNKNOWN_AXIS))
    elif "/" in tag:
        prefix, _, leaf = tag.partition("/")
        namespace, axis = PREFIXES.get(prefix, (prefix, UNKNOWN_AXIS))
        if axis == ITER_AXIS and leaf.endswith(SECONDS_SUFFIX):
            axis = SECONDS_AXIS
    else:
        return Route("", (tag,), UNKNOWN_AXIS)
    canonical = CANONICAL.get(tag)
    if canonical is None or mode == "native":
        return Route(namespace, (leaf,), axis)
    canonical_namespace, _, canonical_leaf = canonical.partition("/")
    keys = (canonical_leaf,) if mode == "canonical" else (leaf, canonical_leaf)
    return Route(canonical_namespace, tuple(dict.fromkeys(keys)), axis)


def run_name(logdir: str | os.PathLike[str]) -> str:
    """The name of the run a writer's log directory stands for: its folder
    (CleanRL's `runs/<run_name>`), the experiment's for DI-engine's
    `<exp_name>/log/serial`."""
    parts = os.path.normpath(os.path.abspath(os.fspath(logdir))).split(os.sep)
    for tail in LOGDIR_TAILS:
        if len(parts) > len(tail) + 1 and tuple(parts[-len(tail):]) == tail:
            return parts[-len(tail) - 1]
    return parts[-1] or "tensorboard"


def stored_name(tag: str, mode: str = "both") -> str:
    """The flat name (`<namespace>/<key>`) the native value of a tag is stored
    under in rltrack's runs and the trackers; `mode="canonical"` gives the
    canonical one where there is one."""
    found = route(tag, mode)
    return f"{found.namespace}/{found.keys[0]}" if found.namespace else found.keys[0]


# ---- values read from a proto ---------------------------------------------------


def typed(text: str) -> Any:
    """A hyperparameter written as text, as the value it was: `2048` an int,
    `True` a bool, `0.00025` a float, `None`, lists and dicts; other text as it is."""
    stripped = text.strip()
    try:
        value = ast.literal_eval(stripped)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
    return value if isinstance(value, (int, float, bool, list, tuple, dict, type(None))) and not isinstance(value, complex) else text


def markdown_table(text: str) -> dict[str, Any]:
    """The `|key|value|` rows of CleanRL's hyperparameter table, typed (`typed`);
    the header and separator rows left out."""
    rows: dict[str, Any] = {}
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            continue
        cells = line[1:-1].split("|", 1)
        if len(cells) != 2:
            continue
        key, value = cells[0].strip(), cells[1].strip()
        if not key or set(key) <= set("-: ") or (key, value) == ("param", "value"):
            continue
        rows[key] = typed(value)
    return rows


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of an encoded protobuf message: ints for varints,
    bytes for the rest (8 bytes for fixed64, 4 for fixed32)."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i : i + size], i + size
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"protobuf wire type {wire} is not read here")
        yield key >> 3, value


def _protobuf_value(buf: bytes) -> Any:
    """A `google.protobuf.Value`: null, number (double), string, bool; others None."""
    for number, value in _fields(buf):
        if number == 2:
            (double,) = struct.unpack("<d", value)
            return int(double) if math.isfinite(double) and double.is_integer() else double
        if number == 3:
            return value.decode("utf-8", "replace")
        if number == 4:
            return bool(value)
    return None


def session_hparams(content: bytes) -> dict[str, Any]:
    """The hyperparameters of the HParams plugin's session start
    (`HParamsPluginData.session_start_info.hparams`, decoded by hand)."""
    hparams: dict[str, Any] = {}
    for number, start in _fields(content):
        if number != 3:  # session_start_info
            continue
        for entry_number, entry in _fields(start):
            if entry_number != 1:  # the hparams map
                continue
            key, value = "", None
            for part, data in _fields(entry):
                if part == 1:
                    key = data.decode("utf-8", "replace")
                elif part == 2:
                    value = _protobuf_value(data)
            hparams[key] = value
    return hparams


_TENSOR_FORMATS = {1: "f", 2: "d", 3: "i", 9: "q"}  # DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64


def _tensor_number(tensor: Any) -> float | None:
    """The one number of a scalar tensor (`add_scalar(new_style=True)`, TF2's summaries)."""
    for name in ("float_val", "double_val", "int_val", "int64_val"):
        values = getattr(tensor, name, ())
        if len(values) == 1:
            return float(values[0])
    content = getattr(tensor, "tensor_content", b"")
    code = _TENSOR_FORMATS.get(getattr(tensor, "dtype", 0))
    if content and code and len(content) == struct.calcsize(code):
        return float(struct.unpack("<" + code, content)[0])
    return None


def histogram_values(value: Any) -> list[float]:
    """Values standing for a histogram summary, a `HistogramProto` (`histo`)
    or the histograms plugin's tensor of (left, right, count) rows (as
    TensorBoard's `EventFileLoader` hands it over): each bucket's count of
    values at its centre, at most `MAX_HISTOGRAM_VALUES` in all."""
    if value.WhichOneof("value") == "histo":
        histo = value.histo
        lefts = [histo.min, *histo.bucket_limit[:-1]]
        buckets = [(max(left, histo.min), min(right, histo.max), count) for left, right, count in zip(lefts, histo.bucket_limit, histo.bucket)]
    else:
        tensor = value.tensor
        code = _TENSOR_FORMATS.get(tensor.dtype, "d")
        content = tensor.tensor_content
        flat = struct.unpack(f"<{len(content) // struct.calcsize(code)}{code}", content) if content else (*tensor.double_val, *tensor.float_val)
        buckets = [(flat[i], flat[i + 1], flat[i + 2]) for i in range(0, len(flat) - 2, 3)]
    total = sum(count for _, _, count in buckets)
    if not total:
        return []
    scale = min(1.0, MAX_HISTOGRAM_VALUES / total)
    values: list[float] = []
    for left, right, count in buckets:
        values.extend([(left + right) / 2] * round(count * scale))
    return values


def image_png(value: Any) -> bytes:
    """The (first) encoded image of an image summary: `image`, or the images
    plugin's tensor (width, height, then the images) as `EventFileLoader` gives it."""
    if value.WhichOneof("value") == "image":
        return bytes(value.image.encoded_image_string)
    return bytes(value.tensor.string_val[2])


# ---- the translator --------------------------------------------------------------


@dataclass(slots=True)
class _Open:
    """The event being gathered for one namespace and kind."""

    time: float
    steps: dict[str, int]
    data: dict[str, Any] = field(default_factory=dict)


class Translator:
    """The events of one process's (or one imported folder's) TensorBoard writers.

    `run`: the run name put on the events. `names`: `run.names` ("both",
    "canonical", "native"). `root`: the first log directory (None: the first
    one seen). `report`: where steps that go back and dropped values are
    counted (section "tensorboard"). `save_image`: saves an image's PNG, see
    `SaveImage` (None: images are dropped and counted). Not thread-safe: one
    thread feeds it (the pipeline thread, or an importer)."""

    def __init__(
        self,
        *,
        run: str = "",
        names: str = "both",
        root: str | os.PathLike[str] | None = None,
        report: Report | None = None,
        save_image: SaveImage | None = None,
        source: str = SOURCE,
    ) -> None:
        if names not in NAME_MODES:
            raise ValueError(f"names={names!r} is not one of {', '.join(NAME_MODES)}")
        self.run = run
        self.names = names
        self.root = None if root is None else os.path.normpath(os.fspath(root))
        self.report = report if report is not None else Report()
        self.save_image = save_image
        self.source = source
        self._routes: dict[tuple[str, str], Route] = {}
        self._open: dict[tuple[str, str, bool], _Open] = {}  # (namespace, kind, a throughput table) -> its open event
        self._pending: dict[tuple[str, str], tuple[str, int, float, float]] = {}  # (logdir, stage) -> a `_iter` half: key, step, value, time
        self._last_step: dict[tuple[str, str], int] = {}
        self._hparams_dirs: set[str] = set()
        self._logdirs: dict[Any, str] = {}  # a logdir as given -> normalised
        self._out: list[Event] = []

    # ---- input

    def add(self, proto: Any, logdir: str | os.PathLike[str]) -> list[Event]:
        """Takes one `Event` proto written in `logdir`; returns the events
        completed by it (values may wait for the rest of their block: `flush`)."""
        if not proto.HasField("summary"):
            return self._take()
        where = self._logdirs.get(logdir)
        if where is None:
            where = self._logdirs[logdir] = os.path.normpath(os.fspath(logdir))
            if self.root is None:
                self.root = where
        step, wall_time = proto.step, proto.wall_time
        for value in proto.summary.value:
            try:
                if value.WhichOneof("value") == "simple_value" and not value.tag.startswith(HPARAMS_PREFIX):  # the common case first
                    self._scalar(where, value.tag, value.simple_value, step, wall_time)
                else:
                    self._value(where, value, step, wall_time)
            except Exception as exc:  # noqa: BLE001 - one odd value must not stop the others
                self.report.count("dropped", f"{value.tag}: {type(exc).__name__}: {exc}", section=SECTION)
        return self._take()

    def flush(self) -> list[Event]:
        """Every value still held: a twin half waiting for its other half, the
        open events. Call it at the end (a writer's close, the run's end)."""
        for held in list(self._pending):
            self._orphan(held)
        for slot, opened in list(self._open.items()):
            self._emit(slot, opened)
        return self._take()

    def _take(self) -> list[Event]:
        out, self._out = self._out, []
        return out

    def _value(self, logdir: str, value: Any, step: int, wall_time: float) -> None:
        tag: str = value.tag
        plugin = value.metadata.plugin_data.plugin_name
        which = value.WhichOneof("value")
        if tag.startswith(HPARAMS_PREFIX) or plugin == "hparams":
            self._hparams_dirs.add(logdir)
            if tag == HPARAMS_SESSION_START:
                self._hparams(session_hparams(value.metadata.plugin_data.content), wall_time)
            return
        if which == "histo" or plugin == "histograms":
            self._put(logdir, tag, "histogram", histogram_values(value), step, wall_time)
            return
        if which == "image" or plugin == "images":
            self._image(logdir, tag, image_png(value), step, wall_time)
            return
        if plugin == "text" or (which == "tensor" and value.tensor.string_val and plugin != "scalars"):
            text = b"\n".join(value.tensor.string_val).decode("utf-8", "replace")
            if tag in HPARAMS_TEXT_TAGS:
                table = markdown_table(text)
                if table:
                    self._hparams(table, wall_time)
                    return
            self._put(logdir, tag.removesuffix(TEXT_SUFFIX), "text", text, step, wall_time)
            return
        if which == "simple_value":
            self._scalar(logdir, tag, value.simple_value, step, wall_time)
        elif which == "tensor" and (number := _tensor_number(value.tensor)) is not None:
            self._scalar(logdir, tag, number, step, wall_time)
        else:
            self.report.count("dropped", f"{plugin or which or 'empty'} summaries (no rltrack kind)", section=SECTION)

    def _hparams(self, hparams: dict[str, Any], wall_time: float) -> None:
        self._out.append(Event(wall_time, hparams, "hparams", "", {}, self.source, run=self.run))

    def _image(self, logdir: str, tag: str, png: bytes, step: int, wall_time: float) -> None:
        if self.save_image is None:
            self.report.count("dropped", "images (no run directory to save them in)", section=SECTION)
            return
        found = self._route(logdir, tag)
        self._put_routed(found, "image", self.save_image(found.namespace, found.keys[0], step, png), {found.axis: step}, wall_time)

    # ---- scalars, twins

    def _scalar(self, logdir: str, tag: str, number: float, step: int, wall_time: float) -> None:
        self._count_back(logdir, tag, step)
        found = self._route(logdir, tag)
        held = (logdir, found.namespace)
        pending = self._pending.get(held)
        if pending is not None and found.twin is not None and not (found.twin == "step" and pending[0] == found.keys[0]):
            self._orphan(held)  # DI-engine writes a stage's `_step/k` right after its `_iter/k`: another half means no twin
            pending = None
        elif found.twin is None:
            pending = None  # a buffer's `_sec/` table, from its own thread, between the halves
        if found.twin == "iter":
            self._pending[held] = (found.keys[0], step, number, wall_time)
            return
        steps = {found.axis: step}
        if pending is not None:  # the `_step` half: one value, both axes, env steps first
            del self._pending[held]
            steps = {STEP_AXIS: step, ITER_AXIS: pending[1]}
            wall_time = pending[3]
        self._put_routed(found, "scalars", number, steps, wall_time)

    def _orphan(self, held: tuple[str, str]) -> None:
        """A `_iter` value without its `_step` twin: at its block's iteration."""
        key, step, number, wall_time = self._pending.pop(held)
        self._put_routed(Route(held[1], (key,), ITER_AXIS), "scalars", number, {ITER_AXIS: step}, wall_time)

    def _count_back(self, logdir: str, tag: str, step: int) -> None:
        last = self._last_step.get((logdir, tag))
        if last is not None and step < last:
            self.report.count("kept", "values whose step went back (a restarted loop)", section=SECTION)
        self._last_step[logdir, tag] = step

    # ---- routing and gathering

    def _route(self, logdir: str, tag: str) -> Route:
        found = self._routes.get((logdir, tag))
        if found is None:
            found = self._routes[logdir, tag] = self._new_route(logdir, tag)
        return found

    def _new_route(self, logdir: str, tag: str) -> Route:
        if logdir == self.root:
            return route(tag, self.names)
        name, parent = os.path.basename(logdir), os.path.dirname(logdir)
        main = tag.replace("/", "_") + "_"
        if name.startswith(main) and len(name) > len(main):  # torch's add_scalars: <writer>/<main>_<key>
            return self._written_in(parent, f"{tag}/{name[len(main):]}")
        if parent.endswith(os.sep + os.path.normpath(tag)):  # tensorboardX's add_scalars: <writer>/<main>/<key>
            return self._written_in(parent[: -len(os.path.normpath(tag)) - 1], f"{tag}/{name}")
        if logdir in self._hparams_dirs:  # add_hparams' metrics: their own tags
            return Route("", (tag,), route(tag).axis)
        return self._written_in(logdir, tag)

    def _written_in(self, writer_dir: str, tag: str) -> Route:
        """The route of a tag of the writer in `writer_dir`: the first log
        directory's by the tag's prefix; another's in a namespace named after
        that directory (relative to the first), the tag as the key."""
        if writer_dir == self.root:
            return route(tag, self.names)
        relative = os.path.relpath(writer_dir, self.root)
        namespace = os.path.basename(writer_dir) if relative.startswith("..") else relative.replace(os.sep, "_")
        return Route(namespace, (tag,), route(tag).axis)

    def _put(self, logdir: str, tag: str, kind: str, value: Any, step: int, wall_time: float) -> None:
        found = self._route(logdir, tag)
        self._put_routed(found, kind, value, {found.axis: step}, wall_time)

    def _put_routed(self, found: Route, kind: str, value: Any, steps: dict[str, int], wall_time: float) -> None:
        slot = (found.namespace, kind, PERIOD_AXIS in steps)  # a buffer's throughput tables, from its own thread, apart
        opened = self._open.get(slot)
        if opened is not None and not self._joins(opened, steps, found.keys):
            self._emit(slot, opened)
            opened = None
        if opened is None:
            opened = self._open[slot] = _Open(wall_time, steps)  # `steps`: made for this value
        for key in found.keys:
            opened.data[key] = value

    @staticmethod
    def _joins(opened: _Open, steps: dict[str, int], keys: tuple[str, ...]) -> bool:
        """Whether a value at `steps` belongs to the open event: same steps and a
        new key; a value at train_iter only joins its block at that iteration,
        and a block at train_iter only takes on the env steps of its first twin."""
        if not opened.data.keys().isdisjoint(keys):
            return False
        if steps == opened.steps:
            return True
        if ITER_AXIS not in steps or steps.get(ITER_AXIS) != opened.steps.get(ITER_AXIS):
            return False
        if len(steps) == 1:
            return True
        if len(opened.steps) == 1:
            opened.steps = dict(steps)
            return True
        return False

    def _emit(self, slot: tuple[str, str, bool], opened: _Open) -> None:
        del self._open[slot]
        namespace, kind, _ = slot
        self._out.append(Event(opened.time, opened.data, kind, namespace, opened.steps, self.source, run=self.run))
