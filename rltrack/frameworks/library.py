"""Each RL library rltrack knows, as one declaration, found by entry point.

A library is declared once, as a `Library` in its module or package
(`rltrack.adapters.<library>.LIBRARY`; `rltrack.frameworks.<library>` for a
library with no adapter) and registered in the entry-point group
`rltrack.libraries` (pyproject.toml), the same way a package of someone
else's adds one: which packages its code lives in (so that the TensorBoard
hook knows which library a writer's caller belongs to), what its TensorBoard
tags mean (the stage, the axis, the canonical twin), its vocabulary, its
adapter and its reader of the folders it writes without rltrack. The
TensorBoard translation (rltrack.frameworks.tensorboard), the shared
vocabulary (rltrack.frameworks.canonical), `rltrack runs`' readers
(rltrack.runs.readers_foreign) and the adapter contract tests read the
registered ones, through the registry and never by importing a library's
module: a tag of a library that is not registered keeps its name, with no
twin.
"""

from __future__ import annotations

import functools
import sys
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from rltrack.frameworks.stages import ITER_AXIS

#: The entry-point group of libraries: name -> "module:LIBRARY".
GROUP = "rltrack.libraries"
#: The axis of a writer's `global_step` where nothing says what it counts.
UNKNOWN_AXIS = "step"
#: rsl_rl writes `Train/mean_reward/time` against whole seconds of training, not iterations.
SECONDS_SUFFIX = "/time"
SECONDS_AXIS = "seconds"


@dataclass(frozen=True)
class Library:
    """One library: `packages`, the top-level packages of its code (a writer
    called from them is the library's); `adapter`, whether it has an adapter
    (rltrack's own: `rltrack.adapters.<name>`; each has its case in the
    adapter contract tests); and what its writer means by its TensorBoard tags:
    `stages`, a tag prefix -> (the DI-engine stage its values are filed under
    in the local layout, the axis its `global_step` counts); `axis`, the axis
    of every other tag its writer writes (the environments' infos it passes
    through: skrl's `Episode_Reward/alive`); `canonical`, its native flat key
    -> canonical flat key (also its part of the shared vocabulary);
    `separator`, what ends a prefix (skrl's `Reward / Total reward (mean)`);
    `twins`, DI-engine's `<stage>_iter/`, `<stage>_step/` twin tags;
    `stored`, the names rltrack's runs hold some of its native keys under
    where they differ from `canonical`'s (SB3's prefixes become namespaces:
    `collector/ep_rew_mean`) -> canonical flat key; `folders`, the
    "module:attribute" of its reader of the run folders it writes without
    rltrack (a `rltrack.runs.readers.RunFormat`), imported only when
    `rltrack runs` looks for runs, so that a declaration stays cheap to read."""

    packages: tuple[str, ...] = ()
    adapter: bool = False
    stages: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    canonical: Mapping[str, str] = field(default_factory=dict)
    axis: str = UNKNOWN_AXIS
    separator: str = "/"
    twins: bool = False
    stored: Mapping[str, str] = field(default_factory=dict)
    folders: str = ""

    def place(self, tag: str) -> tuple[str, str]:
        """(stage, axis) of a tag its writer writes ("" for a prefix of no stage)."""
        prefix = tag.partition(self.separator)[0].strip() if self.separator in tag else tag.partition("/")[0]
        stage, axis = self.stages.get(prefix, ("", self.axis))
        if axis == ITER_AXIS and tag.endswith(SECONDS_SUFFIX):
            axis = SECONDS_AXIS
        return stage, axis


@functools.cache
def libraries() -> dict[str, Library]:
    """The registered libraries by name, read once per process (a few ms: it
    reads every installed package's entry points, so `import rltrack` does not pay it)."""
    from importlib.metadata import entry_points

    found = {}
    for entry in entry_points(group=GROUP):
        try:
            library = entry.load()
        except Exception as exc:  # noqa: BLE001 - one broken declaration must not take every library's tables with it
            _unloadable(entry, f"{type(exc).__name__}: {exc}")
            continue
        if not isinstance(library, Library):
            _unloadable(entry, f"it is a {type(library).__name__}, not an rltrack Library")
            continue
        found[entry.name] = library
    return found


def _unloadable(entry: Any, why: str) -> None:
    """Says once, on stderr, which declaration was left out and what to do:
    its library's keys keep their names and get no canonical twin meanwhile."""
    dist = getattr(getattr(entry, "dist", None), "name", None) or "the package that declares it"
    print(
        f"rltrack: library {entry.name!r} ({entry.value}, entry point group {GROUP!r}) cannot be loaded and is left out: {why}; "
        f"its keys keep their names, without canonical twins. Fix: reinstall {dist} (pip install --force-reinstall --no-deps {dist})",
        file=sys.stderr,
    )


@functools.cache
def _creators() -> dict[str, str]:
    return {package: name for name, library in libraries().items() for package in library.packages}


def creator_library(module: str, file: str | None = None, imported: tuple[str, ...] = ()) -> str | None:
    """The library a writer's caller belongs to: its package (`trl.trainer` ->
    "transformers"); for a script (`__main__`, or a module of no known
    package), CleanRL when it lies in a `cleanrl` folder (CleanRL's scripts,
    as installed or cloned) or imports CleanRL's `cleanrl_utils`
    (`imported`: the top-level names of the modules it imported). None: a
    writer of unknown meaning, its tags kept as written with no twin."""
    found = _creators().get(module.partition(".")[0])
    if found is not None:
        return found
    parts = re.split(r"[\\/]", file or "")[:-1]
    if "cleanrl" in parts or "cleanrl_utils" in imported or "cleanrl" in imported:
        return "cleanrl"
    return None


#: Any TensorBoard writer: an adapter (rltrack.adapters.tensorboard), no vocabulary or tags of its own to declare.
TENSORBOARD = Library(adapter=True)
