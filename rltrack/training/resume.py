"""Continuing a run: which directory `make_logger(resume=...)` means, and where
its step axes stood.

A resumed run writes into its old directory: the journal, text logs and
progress.csv are appended to, TensorBoard gets one more event file beside the
first, and each tracker's delivery continues from its cursor into the same
tracker run (the tracker's run id is kept in its cursor, `cursors/<backend>.json`). So that no step goes backwards anywhere, the
logger starts from the last steps of the journal: records written without a
step continue the numbering, and the best checkpoint metric carries over.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rltrack.core.events import DEFAULT_STEP_AXIS, Event
from rltrack.journal import read_journal


def resolve_run_dir(resume: str | Path, root: Path) -> Path:
    """`resume` as a run directory: a path to one, or a run id (or a run name)
    from the index under `root`."""
    path = Path(resume).expanduser()
    for candidate in (path, root / path):
        if (candidate / "meta.json").is_file():
            return candidate
    try:
        from rltrack.runs import resolve
    except ImportError as exc:  # the index needs the `runs` extra
        raise ValueError(f"resume={str(resume)!r} is not a run directory, and run ids need the index: {exc}") from None
    try:
        found = Path(resolve(root, str(resume)))
    except (LookupError, ValueError) as exc:
        raise ValueError(f"resume={str(resume)!r} is neither a run directory nor a run id under {root}: {exc}") from None
    if not (found / "meta.json").is_file():
        raise ValueError(f"resume={str(resume)!r} names {found}, which is not a run written by rltrack (no meta.json)")
    return found


@dataclass
class ResumeState:
    """Where the journal of a run ended."""

    last_steps: dict[str, int] = field(default_factory=dict)
    namespace_counts: dict[str, int] = field(default_factory=dict)
    best_metric: float | None = None

    @classmethod
    def from_journal(cls, journal: Path) -> ResumeState:
        state = cls()
        try:  # events are read one at a time: a long run's journal is not held in memory
            for event in read_journal(journal):
                state._add(event)
        except FileNotFoundError:  # resumed before anything was journaled
            pass
        return state

    def _add(self, event: Event) -> None:
        if event.kind == "hparams":
            return
        if event.kind == "artifact" and event.namespace == "ckpt":
            if event.data.get("best"):
                self.best_metric = event.data.get("metric")
            return
        self.last_steps = dict(event.steps)
        auto = event.steps.get(DEFAULT_STEP_AXIS)
        if auto is not None:
            self.namespace_counts[event.namespace] = max(self.namespace_counts.get(event.namespace, 0), auto + 1)
