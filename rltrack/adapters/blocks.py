"""Sending one DI-engine stage block through a Logger: what an adapter does at the end of a stage.

The blocks themselves (their keys and arithmetic, and the events one block
becomes) are framework knowledge in rltrack.frameworks.stages, pure functions that know
nothing of a Logger; this module is the one step that needs a live Logger:
sending those events from the training thread and ending the stage with
`Logger.dump(steps)`, the learner's model printed once per logger.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rltrack.frameworks import stages

if TYPE_CHECKING:
    from rltrack.training.logger import Logger

#: Loggers that have printed a learner model already (the print happens once per logger).
_MODEL_PRINTED: weakref.WeakSet[Any] = weakref.WeakSet()


def emit_block(
    logger: Logger,
    namespace: str,
    block: Mapping[str, Any],
    steps: Mapping[str, int],
    *,
    source: str = "api",
    preaggregated: bool = False,
    info_lines: Sequence[str] = (),
    model: Any = None,
    dump: bool = True,
) -> None:
    """Sends one stage's block (see rltrack.frameworks.stages for how its values
    travel) and ends it with `Logger.dump(steps)`. Before the block:
    `info_lines` (the evaluator's episode lines) as one `INFO_KEY` text event,
    and `str(model)` as the `MODEL_KEY` text event the first time a model is
    given to this logger. Non-numeric, non-list, non-string values are left
    to the logger's normaliser, which converts or drops and counts them.
    `dump=False` leaves the `Logger.dump(steps)` to the caller: an adapter
    that sends a whole row (other namespaces, other blocks) at the same steps
    dumps once, so progress.csv gets one row for it."""
    model_text = None
    if model is not None and logger not in _MODEL_PRINTED:
        _MODEL_PRINTED.add(logger)
        model_text = str(model)
    events = stages.block_events(
        namespace, block, steps, time.time(), logger.name, source=source, preaggregated=preaggregated, info_lines=info_lines, model_text=model_text
    )
    for event in events:
        logger.emit(event)
    if dump:
        logger.dump(steps)
