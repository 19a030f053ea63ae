"""Stable-Baselines3 -> rltrack: a `KVWriter` next to SB3's own outputs, and a callback.

    import rltrack
    from rltrack.adapters.sb3 import RLTrackCallback, attach

    logger = rltrack.make_logger(run={"name": "cartpole_ppo"})
    model = PPO("MlpPolicy", "CartPole-v1")
    attach(model, logger)                       # SB3's stdout/csv/tensorboard stay as they were
    eval_cb = EvalCallback(eval_env, callback_on_new_best=RLTrackCallback(logger))
    model.learn(10_000, callback=[RLTrackCallback(logger, save_freq=2_000), eval_cb])
    logger.close()

What arrives in rltrack, per `Logger.dump(step)` of SB3:

* One `Event` per namespace (per namespace and kind), `source="sb3"`. The
  training thread copies the values (arrays too, since SB3 may reuse them)
  and hands them over with `Logger.emit_deferred`; routing keys to
  namespaces and names, and converting numpy scalars, arrays and strings,
  happen on rltrack's pipeline thread.
* Step axes: `env_steps` = the `step` SB3 passes (its `num_timesteps`), and
  `train_iter` = `time/iterations` for on-policy algorithms (PPO, A2C: one
  per rollout-and-update round) or `train/n_updates` for off-policy ones
  (DQN, SAC, TD3: gradient steps). One source is used for the whole run:
  `attach`/`RLTrackCallback` pick it from the model's class; a writer built
  by hand takes the first of the two keys it sees (`time/iterations` if both
  come together). The last known `train_iter` is carried into later dumps
  that lack it (e.g. the dump `EvalCallback` makes), so every event has both
  axes once training began.
* Each SB3 dump ends with `Logger.dump(steps)`, rltrack's store-then-log
  point: aggregating filters emit, the console and text logs print a table.
* Namespaces from SB3's prefixes: `rollout/` -> `collector`, `eval/` ->
  `evaluator`, `train/` -> `learner`, `time/` -> `time`; other prefixes are
  kept as they are, keys without a prefix get namespace `""`. Under `time/`,
  durations (`time_elapsed`, and keys named like `*_time`, `*elapsed*`,
  `*duration*`, `*_sec`, `*_seconds`) are sent as kind `timing`; `fps`,
  `iterations`, `total_timesteps`, `episodes` stay `scalars`.
* `rollout/` values are SB3's moving means over the last `stats_window_size`
  episodes, so `collector` events holding them carry `preaggregated=True`.
* Canonical names (`CANONICAL` below) per `run.names` in the config: "both"
  (default) sends `collector/ep_rew_mean` *and* `collector/reward_mean`.
* `key_excluded`: this writer's format name is `"rltrack"` (`FORMAT_NAME`).
  A key recorded with `exclude="rltrack"` (or a tuple containing it), or with
  an exclusion naming every SB3 format (`stdout`, `log`, `json`, `csv`,
  `tensorboard`), is not sent. SB3's own `exclude="tensorboard"` (used for
  `time/total_timesteps`, `train/n_updates`, ...) does not stop it.
* SB3's typed values become rltrack kinds instead of being dropped:
  `Image` and `Figure` -> kind `image`, `Video` -> kind `video`, `HParam` ->
  kind `hparams` (its `hparam_dict`; the names in `metric_dict`, which only
  wire TensorBoard's HParams tab to scalar tags, go to the run's meta.json
  `info["sb3_hparam_metrics"]`). Images and videos are encoded with Pillow
  (a matplotlib dependency, so present wherever SB3 is) into
  `<run_dir>/media/<namespace>/<key>_<step>.png` (videos as animated PNG),
  and the event's data is JSON: `{key: {"path": "media/...", "format": "png" |
  "apng", "width", "height", "channels", ["frames", "fps"]}}` with `path`
  relative to the run directory. This encoding runs on the calling thread,
  as it does in SB3's own TensorBoard format (a matplotlib figure must be
  rendered there anyway); scalars never pay it. A value that cannot be
  encoded is counted in report.json (section "sb3") rather than raised.

`RLTrackCallback` records hyperparameters at the start of `learn()` and
forwards checkpoints to `Logger.log_checkpoint` (see its docstring). With
`stages=True` (default) it also sends DI-engine's collector, learner and
buffer blocks at each of SB3's own dumps and an evaluator block per
`EvalCallback` evaluation (`_StageRecorder`, `_observe_evaluations`); SB3's
keys then keep their native names, the canonical ones coming from the blocks.

SB3 is imported only when `RLTrackWriter`, `RLTrackCallback` or `attach` is
first used, so this module (and its `CANONICAL` table) imports without it.
"""

from __future__ import annotations

import math
import re
import shutil
import tempfile
import time
import types
import warnings
import weakref
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from rltrack import stages
from rltrack.adapters.blocks import emit_block
from rltrack.canonical import with_canonical_names
from rltrack.events import Event
from rltrack.frameworks.sb3 import (
    ALGORITHM_DUMP_KEY,
    CANONICAL,
    NAMESPACES,
    NOT_LEARNER_VALUES,
    SB3_FORMATS,
    TRAIN_ITER_KEYS,
)
from rltrack.optional import require
from rltrack.rundir import safe_filename

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import KVWriter

    from rltrack.pipeline import Logger

#: The name this writer answers to in SB3's `exclude=` arguments.
FORMAT_NAME = "rltrack"

_PLAIN = frozenset({float, int, str, bool, type(None)})

_DURATION = re.compile(r"elapsed|duration|_time$|^time_|_sec$|_seconds$")

#: Model attributes that are training state, not hyperparameters.
_RUNTIME_ATTRIBUTES = frozenset(
    {"num_timesteps", "start_time", "ep_info_buffer", "ep_success_buffer", "lr_schedule", "batch_norm_stats", "batch_norm_stats_target"}
)


# ---- the writer ------------------------------------------------------------


class _Route:
    """Where one native key goes: (namespace, leaf key, kind, preaggregated) per target name."""

    __slots__ = ("targets",)

    def __init__(self, native: str, mode: str) -> None:
        self.targets: list[tuple[str, str, str, bool]] = []
        native_prefix = native.split("/", 1)[0] if "/" in native else ""
        for name in with_canonical_names({native: None}, CANONICAL, mode):
            prefix, _, leaf = name.partition("/") if "/" in name else ("", "", name)
            namespace = NAMESPACES.get(prefix, prefix)
            kind = "timing" if native_prefix == "time" and name == native and _DURATION.search(leaf) else "scalars"
            self.targets.append((namespace, leaf, kind, native_prefix == "rollout"))


def _excluded(formats: tuple[str, ...] | None) -> bool:
    """Whether a key SB3 recorded with `exclude=formats` is kept from rltrack."""
    return bool(formats) and (FORMAT_NAME in formats or (len(formats) >= 5 and SB3_FORMATS.issubset(formats)))


class _Typed:
    """One of SB3's typed values, already encoded on the calling thread:
    its rltrack kind and JSON data (kind None: it could not be encoded)."""

    __slots__ = ("kind", "data")

    def __init__(self, kind: str | None, data: Any) -> None:
        self.kind = kind
        self.data = data


class _WriterImpl:
    """An SB3 `KVWriter` that sends every dump to an rltrack `Logger`.

    Append it to an SB3 logger's `output_formats`, or use `attach(model,
    logger)` / `add_writer(sb3_logger, logger)`; SB3's other formats are
    untouched. Its format name for `exclude=` is "rltrack". See the module
    docstring for what is sent and how."""

    def __init__(self, logger: Logger, *, names: str | None = None, train_iter_key: str | None = None, close_logger: bool = False) -> None:
        """`logger`: an rltrack Logger. `names` overrides the config's `run.names`
        ("both", "canonical", "native"). `train_iter_key`: the SB3 key giving
        the `train_iter` axis (default: see the module docstring).
        `close_logger=True` makes `close()` (called by SB3's `Logger.close()`)
        close the rltrack logger too; by default it stays open, since whoever
        made it closes it."""
        self.logger = logger
        self.mode = names or logger.config.get("run", {}).get("names", "both")
        self.close_logger = close_logger
        self.train_iter: int | None = None
        #: The key `train_iter` is read from; None: the first of TRAIN_ITER_KEYS seen in a dump.
        self.train_iter_key: str | None = train_iter_key
        #: Pipeline thread only: the route of each native key, per set of namespaces the stage blocks cover.
        self._routes: dict[frozenset[str], dict[str, _Route]] = {}
        self._typed: tuple[type, ...] | None = None
        #: Set by `RLTrackCallback`: computes the collector/learner/buffer blocks at SB3's own dumps.
        self.stages: _StageRecorder | None = None

    def use_stages(self, stages: _StageRecorder) -> None:
        """From now on SB3's own dumps carry the stage blocks, and the blocks
        alone fill the canonical names of the namespaces they cover: SB3's
        native keys there keep only their native names (`rollout/ep_rew_mean`
        is a 100-episode moving mean, `collector/reward_mean` the stage's own
        episodes). `eval/` keys keep their canonical twins until evaluator
        blocks come (an `EvalCallback` observed through `RLTrackCallback`)."""
        self.stages = stages

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]], step: int = 0) -> None:
        """Called by SB3's `Logger.dump` on the training thread, which then clears
        both dicts: copies them (arrays too; SB3's images, figures and videos are
        saved now) and leaves the routing to the pipeline thread (`_events`)."""
        now = time.time()
        iter_key = self.train_iter_key
        if iter_key is None:
            for candidate in TRAIN_ITER_KEYS:
                if candidate in key_values:
                    iter_key = self.train_iter_key = candidate
                    break
        if iter_key is not None:
            value = key_values.get(iter_key)
            if value is not None:
                self.train_iter = value
        steps = {"env_steps": step} if self.train_iter is None else {"env_steps": step, "train_iter": self.train_iter}
        values, excluded = dict(key_values), dict(key_excluded)
        if not _PLAIN.issuperset(map(type, values.values())):  # checked in C: usually all plain
            for key in [key for key, value in values.items() if type(value) not in _PLAIN]:
                if not _excluded(excluded.get(key)):
                    values[key] = self._own_copy(key, values[key], steps)
        if self.stages is not None and ALGORITHM_DUMP_KEY in key_values:  # the algorithm's dump, not EvalCallback's
            self.stages.emit_stage(steps)
        covered = frozenset() if self.stages is None else frozenset(self.stages.namespaces)
        self.logger.emit_deferred(partial(self._events, now, values, excluded, steps, covered))
        self.logger.dump(steps)

    def _own_copy(self, key: str, value: Any, steps: dict[str, int]) -> Any:
        """A value that is not a plain Python one, safe to read later on the
        pipeline thread: arrays and tensors copied, SB3's typed values encoded
        (`_Typed`)."""
        typed = self._typed or self._sb3_types()
        if isinstance(value, typed):
            return _Typed(*self._typed_value(key, value, steps))
        if getattr(value, "ndim", 0):  # arrays may change after dump
            return value.detach().clone() if hasattr(value, "detach") else value.copy()
        return value

    def _events(
        self, now: float, values: dict[str, Any], excluded: dict[str, tuple[str, ...]], steps: dict[str, int], covered: frozenset[str]
    ) -> list[Event]:  # fmt: skip
        """Pipeline thread: one `Event` per namespace and kind of one SB3 dump.
        SB3's keys of the namespaces `covered` by stage blocks keep their native names only."""
        routes = self._routes.get(covered)
        if routes is None:
            routes = self._routes[covered] = {}
        buckets: dict[tuple[str, str], dict[str, Any]] = {}
        preaggregated: set[tuple[str, str]] = set()
        for key, value in values.items():
            if _excluded(excluded.get(key)):
                continue
            media_kind = None
            if type(value) is _Typed:
                media_kind, value = value.kind, value.data
                if media_kind is None:  # could not be encoded (counted in the report)
                    continue
                if media_kind == "hparams":
                    buckets.setdefault(("", "hparams"), {}).update(value)
                    continue
            route = routes.get(key)
            if route is None:
                canonical = CANONICAL.get(key, "")
                route = routes[key] = _Route(key, "native" if canonical.split("/", 1)[0] in covered else self.mode)
            for namespace, leaf, kind, preagg in route.targets:
                bucket = (namespace, media_kind or kind)
                data = buckets.get(bucket)
                if data is None:
                    data = buckets[bucket] = {}
                data[leaf] = value
                if preagg:
                    preaggregated.add(bucket)
        run = self.logger.name
        return [
            Event(now, data, kind, namespace, dict(steps), "sb3", run=run, preaggregated=(namespace, kind) in preaggregated)
            for (namespace, kind), data in buckets.items()
        ]

    def close(self) -> None:
        """Called by SB3's `Logger.close()`; see `close_logger`."""
        if self.close_logger:
            self.logger.close()

    # ---- SB3's typed values ----

    def _sb3_types(self) -> tuple[type, ...]:
        from stable_baselines3.common import logger as sb3

        self._typed = (sb3.Video, sb3.Image, sb3.Figure, sb3.HParam)
        return self._typed

    def _typed_value(self, key: str, value: Any, steps: dict[str, int]) -> tuple[str | None, Any]:
        """(rltrack kind, JSON data) for one of SB3's typed values; (None, None)
        when it cannot be encoded, which is counted in the run's report."""
        kind_name = type(value).__name__
        step = steps["env_steps"]
        try:
            if kind_name == "HParam":
                self.logger.set_run_info({"sb3_hparam_metrics": list(value.metric_dict)})
                return "hparams", dict(value.hparam_dict)
            if kind_name == "Figure":
                return "image", self._save_image(key, _render_figure(value.figure, value.close), step)
            if kind_name == "Image":
                return "image", self._image_value(key, value.image, value.dataformats, step)
            return "video", self._save_video(key, value.frames, value.fps, step)
        except Exception as exc:  # a logging call must never take training down
            reason = f"{key}: {kind_name} could not be encoded: {type(exc).__name__}: {exc}"
            self.logger.report.count("dropped", reason, section="sb3")
            return None, None

    def _media_path(self, key: str, step: int, suffix: str = ".png") -> tuple[Path, str]:
        prefix, _, leaf = key.partition("/") if "/" in key else ("", "", key)
        folder = Path("media") / safe_filename(NAMESPACES.get(prefix, prefix) or "main")
        stem = f"{safe_filename(leaf)}_{step}"
        (self.logger.run_dir / folder).mkdir(parents=True, exist_ok=True)
        name, n = f"{stem}{suffix}", 1
        while (self.logger.run_dir / folder / name).exists():
            name, n = f"{stem}_{n}{suffix}", n + 1
        return self.logger.run_dir / folder / name, (folder / name).as_posix()

    def _image_value(self, key: str, image: Any, dataformats: str, step: int) -> dict[str, Any]:
        if isinstance(image, (str, Path)):  # a path to an image file: copied as it is
            target, relative = self._media_path(key, step, Path(image).suffix.lower())
            shutil.copyfile(image, target)
            return {"path": relative, "format": Path(image).suffix.lstrip(".").lower() or "file", "source": str(image)}
        return self._save_image(key, _to_hwc(_numpy(image), dataformats), step)

    def _save_image(self, key: str, hwc: Any, step: int) -> dict[str, Any]:
        pil = _pil_image(hwc)
        target, relative = self._media_path(key, step)
        pil.save(target, format="PNG")
        height, width, channels = hwc.shape
        return {"path": relative, "format": "png", "width": width, "height": height, "channels": channels}

    def _save_video(self, key: str, frames: Any, fps: float, step: int) -> dict[str, Any]:
        array = _numpy(frames)
        if array.ndim == 4:  # (T, C, H, W): one video
            array = array[None]
        if array.ndim != 5:
            raise ValueError(f"video frames must be (N, T, C, H, W) as for TensorBoard's add_video, got shape {array.shape}")
        n, t, c, h, w = array.shape
        array = array.transpose(1, 3, 0, 4, 2).reshape(t, h, n * w, c)  # the N videos side by side
        images = [_pil_image(frame) for frame in array]
        target, relative = self._media_path(key, step)
        duration = 1000.0 / fps if fps and fps > 0 else 100.0
        images[0].save(target, format="PNG", save_all=True, append_images=images[1:], duration=duration, loop=0)
        return {"path": relative, "format": "apng", "width": n * w, "height": h, "channels": c, "frames": t, "fps": fps}


def _numpy(value: Any) -> Any:
    import numpy as np

    if hasattr(value, "detach"):  # torch
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _to_hwc(array: Any, dataformats: str) -> Any:
    """An image in any of TensorBoard's layouts (HWC, CHW, HW, NCHW, ...) as H x W x C;
    a batch (N) is laid side by side."""
    fmt = dataformats.upper()
    if len(fmt) != array.ndim or set(fmt) - set("NCHW") or len(set(fmt)) != len(fmt):
        raise ValueError(f"dataformats={dataformats!r} does not describe an array of shape {array.shape}")
    for axis in "NCHW":
        if axis not in fmt:
            array = array[..., None]
            fmt += axis
    array = array.transpose([fmt.index(axis) for axis in "NHWC"])
    n, h, w, c = array.shape
    return array.transpose(1, 0, 2, 3).reshape(h, n * w, c)


def _pil_image(hwc: Any) -> Any:
    """H x W x C (C = 1, 3 or 4; floats in [0, 1] as TensorBoard takes them) -> a PIL image."""
    import numpy as np

    pil = require("PIL.Image", "sb3", "Logging SB3 images and videos")
    if hwc.dtype != np.uint8:
        scale = 255.0 if np.issubdtype(hwc.dtype, np.floating) else 1.0
        hwc = np.clip(np.nan_to_num(hwc.astype(np.float64) * scale), 0, 255).astype(np.uint8)
    channels = hwc.shape[-1]
    mode = {1: "L", 3: "RGB", 4: "RGBA"}.get(channels)
    if mode is None:
        raise ValueError(f"an image needs 1, 3 or 4 channels, got {channels}")
    return pil.fromarray(np.ascontiguousarray(hwc[..., 0] if channels == 1 else hwc), mode)


def _render_figure(figure: Any, close: bool) -> Any:
    """A matplotlib figure as an H x W x 4 uint8 array (rendered with Agg, as TensorBoard does)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    array = np.asarray(canvas.buffer_rgba()).copy()
    if close:
        import matplotlib.pyplot as plt

        plt.close(figure)
    return array


# ---- hyperparameters -------------------------------------------------------


def model_hparams(model: BaseAlgorithm) -> dict[str, Any]:
    """The JSON-friendly configuration of an SB3 model: its public attributes
    that are numbers, strings, classes (by name), spaces (as text), schedules
    (their value at the start of training) and containers of those, plus
    `algo`, `env_id`, `total_timesteps` and `sb3_version`. Networks, buffers,
    environments and optimizers are left out."""
    import stable_baselines3

    hparams: dict[str, Any] = {"algo": type(model).__name__}
    for name, value in vars(model).items():
        if name.startswith("_") or name in _RUNTIME_ATTRIBUTES:
            continue
        if name == "action_noise" and value is not None:  # e.g. "NormalActionNoise(mu=[0.], sigma=[0.1])"
            hparams[name] = repr(value)
            continue
        converted = _jsonable(value, top=True)
        if converted is not _SKIP:
            hparams[name] = converted
    env = getattr(model, "env", None)
    if env is not None:
        try:
            spec = env.get_attr("spec", indices=[0])[0]
        except Exception:  # a VecEnv wrapper without get_attr, or an env without spec
            spec = None
        if spec is not None and getattr(spec, "id", None):
            hparams["env_id"] = spec.id
    total = getattr(model, "_total_timesteps", 0)
    if total:
        hparams["total_timesteps"] = int(total)
    hparams["sb3_version"] = stable_baselines3.__version__
    return hparams


_SKIP = object()


def _jsonable(value: Any, top: bool = False, depth: int = 0) -> Any:
    import enum

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, enum.Enum):
        return _jsonable(value.value, depth=depth + 1)
    if isinstance(value, type):
        return value.__name__
    if type(value).__module__.startswith("gymnasium.spaces"):
        return str(value)
    if type(value).__name__ == "device":  # torch.device
        return str(value)
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0 and not hasattr(value, "requires_grad"):
        return _jsonable(value.item(), depth=depth + 1)  # numpy scalar
    if depth < 4:
        if isinstance(value, tuple) and hasattr(value, "_asdict"):  # namedtuple, e.g. TrainFreq
            return {k: _jsonable(v, depth=depth + 1) for k, v in value._asdict().items()}
        if isinstance(value, (list, tuple)):
            return [_jsonable(v, depth=depth + 1) for v in value]
        if isinstance(value, Mapping):
            return {str(k): _jsonable(v, depth=depth + 1) for k, v in value.items()}
    if callable(value) and not hasattr(value, "forward"):  # a schedule: progress_remaining 1.0 -> start value
        try:
            start = value(1.0)
        except Exception:
            start = None
        if isinstance(start, (int, float)) and not isinstance(start, bool):
            return float(start)
        if callable(value) and hasattr(value, "__qualname__"):
            return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    return _SKIP if top else repr(value)[:200]


# ---- the DI-engine stage blocks ----------------------------------------------


def _number(value: Any) -> float | None:
    """A plain float for numbers and 0-d arrays, None for anything else."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        item = value.item()
        return float(item) if isinstance(item, (int, float)) else None
    return None


class _StageRecorder:
    """The raw data of the current collection stage, seen by `RLTrackCallback`
    at every step; turned into blocks by `rltrack.stages` at SB3's own dumps.

    * collector: the episodes SB3's `Monitor` reports in each step's
      `infos[i]["episode"]` (`r`, `l`) since the last dump; `envstep_count` and
      `train_sample_count` = the timesteps since then (each is stored for
      training); `collect_time` = the time spent inside `collect_rollouts`.
    * learner: after each `train()` call (seen as a change of
      `model._n_updates`), its `train/*` values; at the dump their averages
      over the calls, named canonically (`train/loss` -> `total_loss_avg`,
      `train/learning_rate` -> `cur_lr_avg`, others `<leaf>_avg`).
    * buffer (off-policy): `pushed_in` (rows added, from the buffer's write
      position), `sampled_out` (gradient steps x `batch_size`), `removed`
      (rows overwritten), `current_have` (`replay_buffer.size()`), every
      `buffer_seconds`. SB3's replay buffers keep no priorities, use counts or
      ages, so there is no sampling table.
    """

    def __init__(self, logger: Logger, model: Any, buffer_seconds: float) -> None:
        self.logger = logger
        self.model = model
        self.writer: Any = None
        self.collector = stages.CollectorStats()
        self.learner = stages.LearnerAverages()
        self.rewards: list[float] = []
        self.lengths: list[float] = []
        self.stage_start = model.num_timesteps
        self.collect_time = 0.0
        self.rollout_started: float | None = None
        self.seen_updates = getattr(model, "_n_updates", 0)
        #: True once an RLTrackCallback in `learn()` feeds the steps (then the env observer of `attach` stands aside).
        self.fed_by_callback = False
        #: The namespaces whose canonical names the blocks give ("evaluator" once an EvalCallback is observed).
        self.namespaces = {"collector", "learner"}
        self.last_step: float | None = None  # the env observer's: when the previous step ended
        self.replay = getattr(model, "replay_buffer", None)
        self.throughput = None if self.replay is None else stages.BufferThroughput(buffer_seconds)
        if self.replay is not None:
            self.buffer_pos, self.buffer_size, self.buffer_updates = self.replay.pos, self.replay.size(), self.seen_updates

    def steps(self) -> dict[str, int]:
        """The axes the writer gives SB3's own records now."""
        train_iter = None if self.writer is None else self.writer.train_iter
        return {"env_steps": self.model.num_timesteps} if train_iter is None else {"env_steps": self.model.num_timesteps, "train_iter": train_iter}

    def rollout_start(self) -> None:
        self._learner_values()
        self.rollout_started = time.perf_counter()

    def rollout_end(self) -> None:
        if self.rollout_started is not None:
            self.collect_time += time.perf_counter() - self.rollout_started
            self.rollout_started = None

    def step(self, infos: Any) -> None:
        for info in infos or ():
            episode = info.get("episode") if isinstance(info, dict) else None
            if episode is not None:
                self.rewards.append(float(episode["r"]))
                self.lengths.append(float(episode["l"]))
        if self.throughput is not None:
            self._buffer_counts()

    def observed_step(self, infos: Any) -> None:
        """A step seen by the env observer of `attach` (no callback in
        `learn()`): the collection time is the time between steps with no
        `train()` call between them, which is where `collect_rollouts` spends it."""
        now = time.perf_counter()
        trained = getattr(self.model, "_n_updates", 0) != self.seen_updates
        if trained:
            self._learner_values()
        elif self.last_step is not None:
            self.collect_time += now - self.last_step
        self.last_step = now
        self.step(infos)

    def _learner_values(self) -> None:
        updates = getattr(self.model, "_n_updates", 0)
        if updates == self.seen_updates:
            return
        self.seen_updates = updates
        values = {}
        for key, value in self.model.logger.name_to_value.items():
            number = _number(value)
            if key.startswith("train/") and key not in NOT_LEARNER_VALUES and number is not None:
                canonical = CANONICAL.get(key)
                values[canonical.split("/", 1)[1].removesuffix("_avg") if canonical else key[len("train/"):]] = number
        self.learner.add(values)

    def _buffer_counts(self) -> None:
        replay, throughput = self.replay, self.throughput
        assert replay is not None and throughput is not None
        pos, size, updates = replay.pos, replay.size(), getattr(self.model, "_n_updates", 0)
        pushed = (pos - self.buffer_pos) % replay.buffer_size  # checked every step: never a whole buffer apart
        throughput.add(pushed_in=pushed, sampled_out=(updates - self.buffer_updates) * self.model.batch_size, removed=pushed - (size - self.buffer_size))
        self.buffer_pos, self.buffer_size, self.buffer_updates = pos, size, updates
        block = throughput.take(size)
        if block is not None:
            emit_block(self.logger, "buffer", block, self.steps(), source="sb3")

    def emit_stage(self, steps: dict[str, int]) -> None:
        """The collector block (and the learner block, if `train()` ran) of the
        stage that SB3's dump with `steps` ends; the writer's dump follows."""
        self._learner_values()
        now = time.perf_counter()
        collect_time = self.collect_time + (now - self.rollout_started if self.rollout_started is not None else 0.0)
        envsteps = self.model.num_timesteps - self.stage_start
        block = self.collector.stage(
            episode_rewards=self.rewards, episode_lengths=self.lengths, envstep_count=envsteps, train_sample_count=envsteps, duration=collect_time
        )
        emit_block(self.logger, "collector", block, steps, source="sb3", dump=False)
        if self.learner:
            emit_block(self.logger, "learner", self.learner.take(), steps, source="sb3", model=self.model.policy, dump=False)
        self.rewards, self.lengths = [], []
        self.stage_start = self.model.num_timesteps
        self.collect_time = 0.0
        if self.rollout_started is not None:
            self.rollout_started = now

    def emit_evaluation(self, rewards: list[float], lengths: list[float], env_ids: list[int], duration: float, ckpt_name: str | None) -> None:
        steps = self.steps()
        block = stages.evaluator_block(
            episode_rewards=rewards, episode_lengths=lengths, duration=duration, train_iter=steps.get("train_iter"), ckpt_name=ckpt_name
        )
        emit_block(self.logger, "evaluator", block, steps, source="sb3", info_lines=stages.evaluator_info_lines(rewards, env_ids))


#: The stage recorder of each rltrack logger (shared by the RLTrackCallbacks writing to it).
_RECORDERS: weakref.WeakKeyDictionary[Any, _StageRecorder] = weakref.WeakKeyDictionary()
#: The checkpoint an RLTrackCallback wrote last for each rltrack logger, until an evaluation claims it.
_LAST_CHECKPOINT: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _observe_evaluations(eval_callback: Any, logger: Logger) -> None:
    """Makes every evaluation of `eval_callback` (an SB3 `EvalCallback`) send an
    evaluator block: its per-episode returns and lengths are read from
    `evaluate_policy`'s locals through the callback hook EvalCallback passes it,
    the duration from the start of `_on_step` to the last evaluation step, and
    `ckpt_name` is the checkpoint an RLTrackCallback wrote during it (on a new
    best), else absent. Installed once per EvalCallback."""
    if getattr(eval_callback, "_rltrack_observed", False):
        return
    eval_callback._rltrack_observed = True
    recorder = _RECORDERS.get(logger)
    if recorder is not None:
        recorder.namespaces.add("evaluator")
    on_step, log_success = eval_callback._on_step, eval_callback._log_success_callback
    seen: dict[str, Any] = {}

    def capture(locals_: dict[str, Any], globals_: dict[str, Any]) -> None:
        log_success(locals_, globals_)
        seen["rewards"], seen["lengths"], seen["end"] = locals_["episode_rewards"], locals_["episode_lengths"], time.perf_counter()
        if locals_["done"] and (not locals_.get("is_monitor_wrapped") or "episode" in locals_["info"]):
            seen.setdefault("env_ids", []).append(int(locals_["i"]))

    def observed_on_step() -> bool:
        seen.clear()
        _LAST_CHECKPOINT.pop(logger, None)
        start = time.perf_counter()
        result = on_step()
        recorder = _RECORDERS.get(logger)
        if "rewards" in seen and recorder is not None:
            recorder.emit_evaluation(
                [float(r) for r in seen["rewards"]], [float(n) for n in seen["lengths"]], seen.get("env_ids", []),
                seen["end"] - start, _LAST_CHECKPOINT.pop(logger, None),
            )
        return bool(result)

    eval_callback._log_success_callback = capture
    eval_callback._on_step = observed_on_step


def _eval_callbacks(callback: Any) -> list[Any]:
    """The EvalCallbacks in a tree of SB3 callbacks (CallbackList, EventCallback children)."""
    from stable_baselines3.common.callbacks import EvalCallback

    found, stack = [], [callback]
    while stack:
        item = stack.pop()
        if isinstance(item, EvalCallback):
            found.append(item)
        stack.extend(getattr(item, "callbacks", None) or ())
        stack.extend(c for c in (getattr(item, "callback", None), getattr(item, "callback_on_new_best", None)) if c is not None)
    return found


# ---- the callback ----------------------------------------------------------

_HPARAMS_SENT: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


class _CallbackImpl:
    """The body of `RLTrackCallback` (which adds SB3's `BaseCallback` as a base class).

    Where you put it decides what it does, as with SB3's own callbacks:

    * In `model.learn(callback=...)` (alone or in a list): at the start of each
      `learn()` it adds an `RLTrackWriter` to the model's SB3 logger (unless
      one for this rltrack logger is there already, e.g. from `attach`; pass
      `attach=False` to skip), records `model_hparams(model)` with
      `log_hparams` and framework details with `set_run_info`; with
      `save_freq=N` it saves the model every N calls (like SB3's
      `CheckpointCallback`: with k envs that is every N*k timesteps) and
      hands it to `log_checkpoint(path, iteration=num_timesteps)`, which
      writes `ckpt/iteration_<num_timesteps>.pth.tar`.
    * As an `EvalCallback`'s `callback_on_new_best` (or `callback_after_eval`):
      when the evaluation found a new best mean reward it saves the model and
      calls `log_checkpoint(path, iteration=num_timesteps, metric=best_mean_reward)`,
      so `ckpt/ckpt_best.pth.tar` is the best model so far. It also attaches
      the writer and records hyperparameters, so this position alone is enough.

    Checkpoints are SB3 zip files (`model.save`) whatever their `.pth.tar`
    name: `PPO.load("ckpt/ckpt_best.pth.tar")` reads them. As in SB3's
    `CheckpointCallback`, the model is saved on the training thread, here to a
    temporary file that `log_checkpoint` copies into the run directory before
    it returns; the temporary file is removed right after.
    """

    def __init__(
        self,
        logger: Logger,
        save_freq: int = 0,
        *,
        attach: bool = True,
        log_hparams: bool = True,
        stages: bool = True,
        buffer_seconds: float = 60.0,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)  # type: ignore[call-arg]
        if save_freq < 0:
            raise ValueError(f"save_freq={save_freq} must be >= 0 (0: no periodic checkpoints)")
        if not buffer_seconds > 0:
            raise ValueError(f"buffer_seconds={buffer_seconds!r} must be > 0: the seconds between replay-buffer throughput tables, e.g. 60")
        self.stages = stages
        self.buffer_seconds = buffer_seconds
        self._recorder: _StageRecorder | None = None
        self.rltrack_logger = logger
        self.save_freq = save_freq
        self.attach = attach
        self.log_hparams = log_hparams
        self.best_logged = -math.inf
        self._staging: Path | None = None
        self._cleanup: weakref.finalize | None = None
        self.model: Any
        self.parent: Any
        self.n_calls: int
        self.num_timesteps: int

    def _init_callback(self) -> None:
        # learn() calls this right after SB3 configured the model's logger for this run
        if self.save_freq and self._below_eval():
            warnings.warn(
                "RLTrackCallback(save_freq=...) below an EvalCallback saves the best model only; "
                "for periodic checkpoints pass another RLTrackCallback(logger, save_freq=...) to learn()",
                stacklevel=2,
            )
        writer = None
        if self.attach and getattr(self.model, "_logger", None) is not None:
            writer = add_writer(self.model.logger, self.rltrack_logger, train_iter_key=train_iter_key(self.model))
        if self.stages:
            self._start_stages(writer)
        if self.log_hparams:
            hparams = model_hparams(self.model)
            if _HPARAMS_SENT.get(self.rltrack_logger) != hparams:  # not sent yet by another instance of ours
                _HPARAMS_SENT[self.rltrack_logger] = hparams
                self.rltrack_logger.log_hparams(hparams)
                info = {"framework": "stable-baselines3", "sb3_version": hparams["sb3_version"], "algo": hparams["algo"]}
                self.rltrack_logger.set_run_info(info)

    def _start_stages(self, writer: Any) -> None:
        """Shares one stage recorder per rltrack logger and model. Below an
        EvalCallback: observes its evaluations. In `learn()`: records every
        step (see `_StageRecorder`) and finds the EvalCallbacks of the same
        `learn()` at training start."""
        recorder = _RECORDERS.get(self.rltrack_logger)
        if recorder is None or recorder.model is not self.model:
            recorder = _RECORDERS[self.rltrack_logger] = _StageRecorder(self.rltrack_logger, self.model, self.buffer_seconds)
        if writer is not None:
            recorder.writer = writer
        if self._below_eval():
            _observe_evaluations(self.parent, self.rltrack_logger)
        elif self.parent is None:
            self._recorder = recorder
            recorder.fed_by_callback = True
            if writer is not None:
                writer.use_stages(recorder)

    def _on_training_start(self) -> None:
        if self._recorder is not None:
            for eval_callback in _eval_callbacks(self.locals.get("callback")):
                _observe_evaluations(eval_callback, self.rltrack_logger)

    def _on_rollout_start(self) -> None:
        if self._recorder is not None:
            self._recorder.rollout_start()

    def _on_rollout_end(self) -> None:
        if self._recorder is not None:
            self._recorder.rollout_end()

    def _below_eval(self) -> bool:
        return self.parent is not None and hasattr(self.parent, "best_mean_reward")  # an EvalCallback

    def _on_step(self) -> bool:
        if self._recorder is not None:
            self._recorder.step(self.locals.get("infos"))
        if self._below_eval():
            best = float(self.parent.best_mean_reward)
            if best > self.best_logged:
                self.best_logged = best
                self._checkpoint(metric=best)
        elif self.save_freq and self.n_calls % self.save_freq == 0:
            self._checkpoint(metric=None)
        return True

    def _checkpoint(self, metric: float | None) -> None:
        if self._staging is None:
            self._staging = Path(tempfile.mkdtemp(prefix="rltrack-sb3-"))
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._staging, True)
        path = self._staging / f"model_{self.num_timesteps}_{self.n_calls}.zip"
        self.model.save(path)
        try:
            written = self.rltrack_logger.log_checkpoint(path, iteration=self.num_timesteps, metric=metric)  # copied before it returns
        finally:
            path.unlink(missing_ok=True)
        if written is not None:
            _LAST_CHECKPOINT[self.rltrack_logger] = written
        if self.verbose >= 2:
            best = "" if metric is None else f" (best mean reward {metric:.3g})"
            print(f"rltrack: checkpoint at {self.num_timesteps} timesteps{best}")

    def _on_training_end(self) -> None:
        if self._cleanup is not None:
            self._cleanup()  # removes the staging directory
            self._cleanup = None
            self._staging = None


# ---- SB3-dependent classes, built on first use ------------------------------

_CLASSES: dict[str, type] = {}


def _observe_steps(venv: Any, recorder: _StageRecorder) -> None:
    """Hands each step's infos from `venv.step_wait` to the stage recorder of
    `attach`, unless an `RLTrackCallback` feeds it. The hook is an attribute
    of this one VecEnv object, not a wrapper: the model's env keeps its type
    and its wrapper chain, which SB3 walks side by side with the eval env's
    (`EvalCallback`'s type check, `sync_envs_normalization` copying
    `VecNormalize` statistics level by level)."""
    if "_rltrack_recorder" not in vars(venv):
        step_wait = venv.step_wait

        def observed_step_wait() -> Any:
            result = step_wait()
            current = venv._rltrack_recorder
            if not current.fed_by_callback:
                current.observed_step(result[3])
            return result

        venv.step_wait = observed_step_wait
    venv._rltrack_recorder = recorder


def _classes() -> dict[str, type]:
    if not _CLASSES:
        sb3_logger = require("stable_baselines3.common.logger", "sb3", "rltrack.adapters.sb3")
        sb3_callbacks = require("stable_baselines3.common.callbacks", "sb3", "rltrack.adapters.sb3")
        for name, impl, base in (
            ("RLTrackWriter", _WriterImpl, sb3_logger.KVWriter),
            ("RLTrackCallback", _CallbackImpl, sb3_callbacks.BaseCallback),
        ):
            namespace = {"__module__": __name__, "__qualname__": name, "__doc__": impl.__doc__}
            cls = types.new_class(name, (impl, base), exec_body=lambda ns, extra=namespace: ns.update(extra))
            _CLASSES[name] = cls
            globals()[name] = cls  # later lookups (and pickle) find it as a plain attribute
    return _CLASSES


def __getattr__(name: str) -> Any:
    if name in ("RLTrackWriter", "RLTrackCallback"):
        return _classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:

    class RLTrackWriter(_WriterImpl, KVWriter):
        """An SB3 `KVWriter` sending every dump to an rltrack `Logger`."""

    class RLTrackCallback(_CallbackImpl, BaseCallback):
        """Hyperparameters and checkpoints of an SB3 model, to an rltrack `Logger`."""


def train_iter_key(model: Any) -> str | None:
    """The SB3 key that counts training iterations for `model`'s algorithm."""
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    if isinstance(model, OnPolicyAlgorithm):
        return "time/iterations"
    if isinstance(model, OffPolicyAlgorithm):
        return "train/n_updates"
    return None


def add_writer(sb3_logger: Any, logger: Logger, **writer_options: Any) -> Any:
    """Appends an `RLTrackWriter(logger, **writer_options)` to
    `sb3_logger.output_formats`, unless one for the same rltrack logger is
    there already; returns that writer."""
    writer_cls = _classes()["RLTrackWriter"]
    for existing in sb3_logger.output_formats:
        if isinstance(existing, writer_cls) and existing.logger is logger:
            return existing
    writer = writer_cls(logger, **writer_options)
    sb3_logger.output_formats.append(writer)
    return writer


def attach(
    model: BaseAlgorithm, logger: Logger, *, tb_log_name: str | None = None, stages: bool = True, buffer_seconds: float = 60.0,
    **writer_options: Any,
) -> Any:  # fmt: skip
    """Adds an `RLTrackWriter` to `model`'s SB3 logger and returns the writer.

    If the model has a logger set with `model.set_logger(...)`, the writer is
    appended to it and its own outputs stay as they are. Otherwise (SB3 would
    build its default logger inside `learn()`), a logger is configured now
    exactly as SB3 would — `stdout` when `model.verbose >= 1`, `tensorboard`
    under `model.tensorboard_log/<tb_log_name>_<n>` when that is set, with
    `tb_log_name` defaulting to the algorithm's name as in `learn()` — and set
    with `model.set_logger`. Unlike SB3's default, that logger is then kept
    across `learn()` calls (one TensorBoard directory rather than one per
    call); to keep SB3's per-call behaviour, pass `RLTrackCallback(logger)` to
    `learn()` instead of calling `attach`.
    """
    _classes()
    if not getattr(model, "_custom_logger", False):
        from stable_baselines3.common.utils import configure_logger

        sb3_logger = configure_logger(model.verbose, model.tensorboard_log, tb_log_name or type(model).__name__, True)
        model.set_logger(sb3_logger)
    writer_options.setdefault("train_iter_key", train_iter_key(model))
    writer = add_writer(model.logger, logger, **writer_options)
    if stages and getattr(model, "env", None) is not None:
        recorder = _RECORDERS.get(logger)
        if recorder is None or recorder.model is not model:
            recorder = _RECORDERS[logger] = _StageRecorder(logger, model, buffer_seconds)
        recorder.writer = writer
        writer.use_stages(recorder)
        _observe_steps(model.env, recorder)
    return writer


__all__ = ["CANONICAL", "FORMAT_NAME", "RLTrackCallback", "RLTrackWriter", "add_writer", "attach", "model_hparams", "train_iter_key"]

