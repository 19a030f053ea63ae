"""SpinningUp's own helpers from `spinup/utils/logx.py`, reproduced so that
rltrack's drop-in `EpochLogger` (rltrack.adapters.spinup.logger) needs no SpinningUp
installed: the coloured messages, the epoch statistics `log_tabular` and
`get_stats` compute, and the pickling of `save_state`.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

_COLORS = dict(gray=30, red=31, green=32, yellow=33, blue=34, magenta=35, cyan=36, white=37, crimson=38)


def colorize(string: str, color: str, bold: bool = False, highlight: bool = False) -> str:
    """`string` in ANSI colour, as SpinningUp's `logx.colorize`."""
    attr = []
    num = _COLORS[color]
    if highlight:
        num += 10
    attr.append(str(num))
    if bold:
        attr.append("1")
    return "\x1b[%sm%s\x1b[0m" % (";".join(attr), string)


def epoch_statistics(values: Any, with_min_and_max: bool = False) -> tuple[Any, ...]:
    """(mean, std) or (mean, std, min, max) of `values` in float64, std with ddof=0."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        nan = np.float64("nan")
        return (nan, nan, nan, nan) if with_min_and_max else (nan, nan)
    mean, std = x.mean(), x.std()
    if with_min_and_max:
        return mean, std, x.min(), x.max()
    return mean, std


def dump_pickle(obj: Any, path: str) -> None:
    """`obj` saved to `path` with joblib, or pickle when joblib is missing, as SpinningUp's `save_state`."""
    try:
        import joblib
    except ImportError:
        with open(path, "wb") as f:
            pickle.dump(obj, f)
    else:
        joblib.dump(obj, path)
