"""SB3's typed values (`Image`, `Figure`, `Video`, `HParam`) as rltrack kinds and JSON data.

SB3's TensorBoard format writes these itself; rltrack's writer
(rltrack.adapters.sb3.writer) turns them into kinds `image`, `video` and
`hparams` instead of dropping them. This module is that value conversion:
images and videos are encoded with Pillow (a matplotlib dependency, so present
wherever SB3 is) into `<run_dir>/media/<namespace>/<key>_<step>.png` (videos as
animated PNG), and the event's data is `{"path": "media/...", "format": "png" |
"apng", "width", "height", "channels", ["frames", "fps"]}` with `path` relative
to the run directory. It runs on the calling thread, as in SB3's own
TensorBoard format (a matplotlib figure must be rendered there anyway), and
only for typed values: scalars never pay it. numpy, Pillow, matplotlib and
SB3 are imported on first use.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltrack.adapters.sb3.keys import NAMESPACES
from rltrack.core.optional import require
from rltrack.sinks.rundir import media_file

if TYPE_CHECKING:
    from rltrack.training.logger import Logger

_TYPES: tuple[type, ...] = ()


def sb3_types() -> tuple[type, ...]:
    """SB3's typed value classes: `Video`, `Image`, `Figure`, `HParam`."""
    global _TYPES
    if not _TYPES:
        from stable_baselines3.common import logger as sb3

        _TYPES = (sb3.Video, sb3.Image, sb3.Figure, sb3.HParam)
    return _TYPES


class Encoded:
    """One of SB3's typed values, already encoded on the calling thread:
    its rltrack kind and JSON data (kind None: it could not be encoded)."""

    __slots__ = ("kind", "data")

    def __init__(self, kind: str | None, data: Any) -> None:
        self.kind = kind
        self.data = data


def encode(logger: Logger, key: str, value: Any, steps: dict[str, int]) -> Encoded:
    """One of SB3's typed values as (rltrack kind, JSON data); kind None when
    it cannot be encoded, which is counted in the run's report (section
    "sb3") rather than raised. An `HParam`'s `metric_dict` names go to the
    run's meta.json `info["sb3_hparam_metrics"]`."""
    kind_name = type(value).__name__
    step = steps["env_steps"]
    try:
        if kind_name == "HParam":
            logger.set_run_info({"sb3_hparam_metrics": list(value.metric_dict)})
            return Encoded("hparams", dict(value.hparam_dict))
        if kind_name == "Figure":
            return Encoded("image", _save_image(logger, key, _render_figure(value.figure, value.close), step))
        if kind_name == "Image":
            return Encoded("image", _image_value(logger, key, value.image, value.dataformats, step))
        return Encoded("video", save_video(logger, key, value.frames, value.fps, step))
    except Exception as exc:  # a logging call must never take training down
        reason = f"{key}: {kind_name} could not be encoded: {type(exc).__name__}: {exc}"
        logger.report.count("dropped", reason, section="sb3")
        return Encoded(None, None)


def _media_path(logger: Logger, key: str, step: int, suffix: str = ".png") -> tuple[Path, str]:
    prefix, _, leaf = key.partition("/") if "/" in key else ("", "", key)
    return media_file(logger.run_dir, NAMESPACES.get(prefix, prefix), leaf, step, suffix)


def _image_value(logger: Logger, key: str, image: Any, dataformats: str, step: int) -> dict[str, Any]:
    if isinstance(image, (str, Path)):  # a path to an image file: copied as it is
        target, relative = _media_path(logger, key, step, Path(image).suffix.lower())
        shutil.copyfile(image, target)
        return {"path": relative, "format": Path(image).suffix.lstrip(".").lower() or "file", "source": str(image)}
    return _save_image(logger, key, _to_hwc(_numpy(image), dataformats), step)


def _save_image(logger: Logger, key: str, hwc: Any, step: int) -> dict[str, Any]:
    pil = _pil_image(hwc)
    target, relative = _media_path(logger, key, step)
    pil.save(target, format="PNG")
    height, width, channels = hwc.shape
    return {"path": relative, "format": "png", "width": width, "height": height, "channels": channels}


def save_video(logger: Logger, key: str, frames: Any, fps: float, step: int) -> dict[str, Any]:
    """Saves TensorBoard-layout video frames ((N, T, C, H, W) or (T, C, H, W): SB3's
    `Video`, TorchRL's `log_video`) as one animated PNG, the N videos side by side."""
    array = _numpy(frames)
    if array.ndim == 4:  # (T, C, H, W): one video
        array = array[None]
    if array.ndim != 5:
        raise ValueError(f"video frames must be (N, T, C, H, W) as for TensorBoard's add_video, got shape {array.shape}")
    n, t, c, h, w = array.shape
    array = array.transpose(1, 3, 0, 4, 2).reshape(t, h, n * w, c)  # the N videos side by side
    images = [_pil_image(frame) for frame in array]
    target, relative = _media_path(logger, key, step)
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
