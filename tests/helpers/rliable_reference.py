"""rliable 1.2.0 (Agarwal et al., NeurIPS 2021), the reference rltrack.runs.stats is checked against.

It is installed with --no-deps (see the Makefile): it wants arch < 8, and arch 7.x
calls pandas' `deprecate_kwarg` the way pandas 2 took it, which pandas 3 refuses at
import (arch 8 in turn refuses rliable's `random_state` argument). `import_rliable`
gives pandas' decorator its old first argument (a warning class, as pandas 2
defaulted to) for arch's one use before importing arch; nothing of rltrack goes
through it. rliable draws its replications from numpy's global generator: seeded here.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest


def import_rliable() -> tuple[Any, Any]:
    """(rliable.library, rliable.metrics); the test is skipped where rliable is not installed."""
    pytest.importorskip("rliable", reason="rliable is the reference the statistics are checked against (installed by the Makefile)")
    import pandas.util._decorators as decorators

    original = decorators.deprecate_kwarg
    if not isinstance(original, functools.partial) and original.__code__.co_varnames[:1] == ("klass",):  # pandas 3, not shimmed yet
        decorators.deprecate_kwarg = functools.partial(original, FutureWarning)
    from rliable import library, metrics

    np.random.seed(0)
    return library, metrics
