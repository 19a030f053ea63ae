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
* every value keeps the tag it was written under: `charts/episodic_return`
  is namespace `charts`, key `episodic_return` (split at the first "/").
  What the tag means comes from the library whose code wrote it, never from
  its prefix alone (`library`: the hook on live writers knows each tag's
  caller; rltrack.frameworks.library): for a known
  library, the DI-engine stage its values are filed under locally (the
  event's `stage`), the axis its step counts (`charts/` at env steps in
  CleanRL, every tag of rsl_rl's writer at train_iter) and its canonical
  (DI-engine) twin, added beside it or swapped in per `run.names`; a tag of
  an unknown writer stays as written, at axis `step`, with no twin (HF's
  `train/loss` is not SB3's).
* DI-engine/LightZero's twins (its writers only) `<stage>_iter/<k>` (train_iter) and
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
* text (`add_text`) -> `text`; CleanRL's `hyperparameters` markdown table,
  transformers' `args` (its TrainingArguments as JSON) and the HParams
  plugin's session start -> `hparams` with typed values (`2048` an int,
  `True` a bool, `2.5e-4` a float; the plugin keeps numbers as doubles, so
  an integral one becomes an int);
* histograms -> `histogram`: the proto keeps bucket counts, not the values,
  so each bucket gives its count of values at its centre (at most
  `MAX_HISTOGRAM_VALUES`, scaled down);
* images -> `image` through `save_image` (the caller saves the PNG into the run
  directory), else dropped and counted;
* a step that goes back (a restarted loop) is kept, and counted in the
  report (`tensorboard.kept`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

from rltrack.core.events import Event
from rltrack.core.report import Report
from rltrack.frameworks.canonical import NAME_MODES
from rltrack.frameworks.stages import ITER_AXIS, STEP_AXIS
from rltrack.frameworks.tensorboard_tags import (
    HPARAMS_PREFIX,
    HPARAMS_SESSION_START,
    HF_ARGS_TAG,
    HPARAMS_TEXT_TAGS,
    PERIOD_AXIS,
    TEXT_SUFFIX,
    THROUGHPUT_HALF,
    TWIN_AXES,
    TWIN_TAG,
)
from rltrack.frameworks.library import UNKNOWN_AXIS, libraries
from rltrack.frameworks.tensorboard_runs import folder_library
from rltrack.frameworks.tensorboard_values import (
    histogram_values,
    image_png,
    json_object,
    markdown_table,
    session_hparams,
    tensor_number,
)

SOURCE = "tensorboard"
#: The report section of the translation's counts.
SECTION = "tensorboard"

#: Saves one image: (namespace, key, step, PNG bytes) -> the image event's data for that key.
SaveImage = Callable[[str, str, int, bytes], dict[str, Any]]
#: (a writer's log directory as it gives it, a tag as written) -> the library whose code wrote it (None: unknown).
LibraryOf = Callable[[str, str], "str | None"]


@dataclass(frozen=True, slots=True)
class Route:
    """Where one tag's values go: `places`, (namespace, key, stage) for the
    value as written (namespace and key joined by "/" give the tag back) and
    for its canonical twin (per `run.names`); `stage` the DI-engine stage it
    is filed under locally when that is not its namespace (""); the axis the
    writer's step is on; `twin` is "iter" or "step" for one half of a
    DI-engine twin, None otherwise."""

    places: tuple[tuple[str, str, str], ...]
    axis: str
    twin: str | None = None


def split_tag(tag: str) -> tuple[str, str]:
    """(namespace, key) of a tag as written: split at its first "/" (`charts/episodic_return`
    -> `charts`, `episodic_return`), ("", tag) without one."""
    namespace, _, key = tag.partition("/")
    return (namespace, key) if key else ("", tag)


def route(tag: str, mode: str = "both", library: str | None = None) -> Route:
    """The route of a tag written in the first log directory by `library`'s
    code (rltrack.frameworks.library.libraries(); None: unknown, the
    tag as written at axis `step`)."""
    known = libraries().get(library) if library else None
    if known is None:
        return Route((split_tag(tag) + ("",),), UNKNOWN_AXIS)
    twin = TWIN_TAG.match(tag) if known.twins else None
    if twin is not None:
        half = twin["axis"]
        if half == THROUGHPUT_HALF:
            return Route(((twin["stage"], twin["key"], ""),), PERIOD_AXIS)
        return Route(((twin["stage"], twin["key"], ""),), TWIN_AXES[half], half)
    namespace, key = split_tag(tag)
    stage, axis = known.place(tag)
    canonical = None if mode == "native" else known.canonical.get(tag)
    places = [] if canonical is not None and mode == "canonical" else [(namespace, key, "" if stage == namespace else stage)]
    if canonical is not None:
        canonical_namespace, _, canonical_key = canonical.partition("/")
        places.append((canonical_namespace, canonical_key, ""))
    return Route(tuple(places), axis)


def stored_name(tag: str, mode: str = "both", library: str | None = None) -> str:
    """The flat name (`<namespace>/<key>`) the first value of a tag is stored
    under in rltrack's runs and the trackers: the tag as written (DI-engine's
    twins as their one value, `collector/reward_mean`); `mode="canonical"`
    gives the canonical one where `library` has one."""
    namespace, key, _ = route(tag, mode, library).places[0]
    return f"{namespace}/{key}" if namespace else key


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
    `SaveImage` (None: images are dropped and counted). `library`: which
    library wrote a tag (`LibraryOf`; the hook on live writers knows each
    tag's caller, files on disk have `folder_library`). Not thread-safe: one
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
        library: LibraryOf = folder_library,
    ) -> None:
        if names not in NAME_MODES:
            raise ValueError(f"names={names!r} is not one of {', '.join(NAME_MODES)}")
        self.run = run
        self.names = names
        self.root = None if root is None else os.path.normpath(os.fspath(root))
        self.report = report if report is not None else Report()
        self.save_image = save_image
        self.source = source
        self.library = library
        self._routes: dict[tuple[str, str], Route] = {}
        self._open: dict[tuple[str, str, str, bool], _Open] = {}  # (namespace, stage, kind, a throughput table) -> its open event
        self._pending: dict[tuple[str, str], tuple[str, int, float, float]] = {}  # (logdir, stage) -> a `_iter` half: key, step, value, time
        self._last_step: dict[tuple[str, str], int] = {}
        self._hparams_dirs: set[str] = set()
        self._logdirs: dict[Any, str] = {}  # a logdir as given -> normalised
        self._given: dict[str, str] = {}  # normalised -> the logdir as first given (what `library` is asked with)
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
            self._given.setdefault(where, os.fspath(logdir))
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

    def _library_of(self, logdir: str, tag: str) -> str | None:
        return self.library(self._given.get(logdir, logdir), tag)

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
            hparams = self._text_hparams(logdir, tag, text)
            if hparams:
                self._hparams(hparams, wall_time)
            else:
                self._put(logdir, tag.removesuffix(TEXT_SUFFIX), "text", text, step, wall_time)
            return
        if which == "simple_value":
            self._scalar(logdir, tag, value.simple_value, step, wall_time)
        elif which == "tensor" and (number := tensor_number(value.tensor)) is not None:
            self._scalar(logdir, tag, number, step, wall_time)
        else:
            self.report.count("dropped", f"{plugin or which or 'empty'} summaries (no rltrack kind)", section=SECTION)

    def _text_hparams(self, logdir: str, tag: str, text: str) -> dict[str, Any]:
        """The hyperparameters a text holds: a `hyperparameters` markdown table
        (CleanRL's), transformers' TrainingArguments JSON; {} for other text."""
        if tag in HPARAMS_TEXT_TAGS:
            return markdown_table(text)
        if tag == HF_ARGS_TAG and self._library_of(logdir, tag) == "transformers":
            return json_object(text)
        return {}

    def _hparams(self, hparams: dict[str, Any], wall_time: float) -> None:
        self._out.append(Event(wall_time, hparams, "hparams", "", {}, self.source, run=self.run))

    def _image(self, logdir: str, tag: str, png: bytes, step: int, wall_time: float) -> None:
        if self.save_image is None:
            self.report.count("dropped", "images (no run directory to save them in)", section=SECTION)
            return
        found = self._route(logdir, tag)
        namespace, key, _ = found.places[0]
        self._put_routed(found, "image", self.save_image(namespace, key, step, png), {found.axis: step}, wall_time)

    # ---- scalars, twins

    def _scalar(self, logdir: str, tag: str, number: float, step: int, wall_time: float) -> None:
        self._count_back(logdir, tag, step)
        found = self._route(logdir, tag)
        namespace, key, _ = found.places[0]
        held = (logdir, namespace)
        pending = self._pending.get(held)
        if pending is not None and found.twin is not None and not (found.twin == "step" and pending[0] == key):
            self._orphan(held)  # DI-engine writes a stage's `_step/k` right after its `_iter/k`: another half means no twin
            pending = None
        elif found.twin is None:
            pending = None  # a buffer's `_sec/` table, from its own thread, between the halves
        if found.twin == "iter":
            self._pending[held] = (key, step, number, wall_time)
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
        self._put_routed(Route(((held[1], key, ""),), ITER_AXIS), "scalars", number, {ITER_AXIS: step}, wall_time)

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
        library = self._library_of(logdir, tag)
        if logdir == self.root:
            return route(tag, self.names, library)
        name, parent = os.path.basename(logdir), os.path.dirname(logdir)
        main = tag.replace("/", "_") + "_"
        if name.startswith(main) and len(name) > len(main):  # torch's add_scalars: <writer>/<main>_<key>
            return self._written_in(parent, f"{tag}/{name[len(main):]}", library)
        if parent.endswith(os.sep + os.path.normpath(tag)):  # tensorboardX's add_scalars: <writer>/<main>/<key>
            return self._written_in(parent[: -len(os.path.normpath(tag)) - 1], f"{tag}/{name}", library)
        if logdir in self._hparams_dirs:  # add_hparams' metrics: their own tags
            return Route((("", tag, ""),), route(tag, library=library).axis)
        return self._written_in(logdir, tag, library)

    def _written_in(self, writer_dir: str, tag: str, library: str | None) -> Route:
        """The route of a tag of the writer in `writer_dir`: the first log
        directory's as its library means it; another's in a namespace named after
        that directory (relative to the first), the tag as the key."""
        if writer_dir == self.root:
            return route(tag, self.names, library)
        relative = os.path.relpath(writer_dir, self.root)
        namespace = os.path.basename(writer_dir) if relative.startswith("..") else relative.replace(os.sep, "_")
        return Route(((namespace, tag, ""),), route(tag, library=library).axis)

    def _put(self, logdir: str, tag: str, kind: str, value: Any, step: int, wall_time: float) -> None:
        found = self._route(logdir, tag)
        self._put_routed(found, kind, value, {found.axis: step}, wall_time)

    def _put_routed(self, found: Route, kind: str, value: Any, steps: dict[str, int], wall_time: float) -> None:
        throughput = PERIOD_AXIS in steps  # a buffer's throughput tables, from its own thread, apart
        for namespace, key, stage in found.places:
            slot = (namespace, stage, kind, throughput)
            opened = self._open.get(slot)
            if opened is not None and not self._joins(opened, steps, key):
                self._emit(slot, opened)
                opened = None
            if opened is None:
                opened = self._open[slot] = _Open(wall_time, dict(steps))
            opened.data[key] = value

    @staticmethod
    def _joins(opened: _Open, steps: dict[str, int], key: str) -> bool:
        """Whether a value at `steps` belongs to the open event: same steps and a
        new key; a value at train_iter only joins its block at that iteration,
        and a block at train_iter only takes on the env steps of its first twin."""
        if key in opened.data:
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

    def _emit(self, slot: tuple[str, str, str, bool], opened: _Open) -> None:
        del self._open[slot]
        namespace, stage, kind, _ = slot
        self._out.append(Event(opened.time, opened.data, kind, namespace, opened.steps, self.source, run=self.run, stage=stage))
