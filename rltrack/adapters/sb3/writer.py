"""The body of `RLTrackWriter`: an SB3 `KVWriter` that hands every SB3 dump to an rltrack `Logger`.

SB3 calls `write` on the training thread at each `Logger.dump`; this module
is that hook and nothing else: it copies the dump, lets the stage recorder
(rltrack.adapters.sb3.stages) end its stage, and leaves the routing of keys to
namespaces, names and kinds to rltrack's pipeline thread. What the keys mean
is rltrack.adapters.sb3.keys; SB3's typed values are encoded by
rltrack.adapters.sb3.media. rltrack.adapters.sb3.callback makes the class
`RLTrackWriter` from `WriterBody` and SB3's `KVWriter` on first use; the package
docstring says what arrives in rltrack.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from rltrack.adapters.sb3.media import Encoded, encode, sb3_types
from rltrack.frameworks.canonical import with_canonical_names
from rltrack.core.events import Event
from rltrack.adapters.sb3.keys import (
    ALGORITHM_DUMP_KEY,
    CANONICAL,
    DURATION,
    NAMESPACES,
    TRAIN_ITER_KEYS,
    excluded,
)

if TYPE_CHECKING:
    from rltrack.adapters.sb3.stages import StageRecorder
    from rltrack.training.logger import Logger

_PLAIN = frozenset({float, int, str, bool, type(None)})


def _route(native: str, mode: str) -> list[tuple[str, str, str, bool, str]]:
    """Where one native key goes: (namespace, key, kind, preaggregated, stage)
    per name `mode`: the key as SB3 wrote it (`rollout/ep_rew_mean`: namespace
    `rollout`, filed locally under its stage `collector`) and its canonical twin."""
    targets = []
    prefix, _, leaf = native.partition("/") if "/" in native else ("", "", native)
    stage = NAMESPACES.get(prefix, prefix)
    for name in with_canonical_names({native: None}, CANONICAL, mode):
        if name == native:
            kind = "timing" if prefix == "time" and DURATION.search(leaf) else "scalars"
            targets.append((prefix, leaf, kind, prefix == "rollout", "" if stage == prefix else stage))
        else:
            namespace, _, key = name.partition("/")
            targets.append((namespace, key, "scalars", prefix == "rollout", ""))
    return targets


class WriterBody:
    """An SB3 `KVWriter` that sends every dump to an rltrack `Logger`.

    Append it to an SB3 logger's `output_formats`, or use `attach(model,
    logger)` / `add_writer(sb3_logger, logger)`; SB3's other formats are
    untouched. Its format name for `exclude=` is "rltrack". See the module
    docstring of rltrack.adapters.sb3 for what is sent and how."""

    def __init__(
        self, logger: Logger, *, names: str | None = None, train_iter_key: str | None = None, rollout_steps: int | None = None,
        close_logger: bool = False,
    ) -> None:  # fmt: skip
        """`logger`: an rltrack Logger. `names` overrides the config's `run.names`
        ("both", "canonical", "native"). `train_iter_key`: the SB3 key giving
        the `train_iter` axis (default: see the package docstring, rltrack.adapters.sb3).
        `rollout_steps`: for an on-policy model, the env steps of one
        rollout-and-update round (`n_steps * n_envs`); `train_iter` is then
        `env_steps // rollout_steps` (the rounds completed) at every dump,
        which counts on across `learn()` calls and `PPO.load` as SB3's
        `num_timesteps` does (SB3's `time/iterations` restarts at 1 in every call).
        `close_logger=True` makes `close()` (called by SB3's `Logger.close()`)
        close the rltrack logger too; by default it stays open, since whoever
        made it closes it."""
        self.logger = logger
        self.mode = names or logger.config.get("run", {}).get("names", "both")
        self.close_logger = close_logger
        self.train_iter: int | None = None
        self.rollout_steps = rollout_steps
        #: The key `train_iter` is read from; None: the first of TRAIN_ITER_KEYS seen in a dump.
        self.train_iter_key: str | None = train_iter_key
        #: Pipeline thread only: the route of each native key, per set of namespaces the stage blocks cover.
        self._routes: dict[frozenset[str], dict[str, list[tuple[str, str, str, bool, str]]]] = {}
        #: Set by `RLTrackCallback`: computes the collector/learner/buffer blocks at SB3's own dumps.
        self.stages: StageRecorder | None = None

    def use_stages(self, stages: StageRecorder) -> None:
        """From now on SB3's own dumps carry the stage blocks, and the blocks
        alone fill the canonical names of the namespaces they cover: SB3's
        native keys there keep only their native names (`rollout/ep_rew_mean`
        is a 100-episode moving mean, `collector/reward_mean` the stage's own
        episodes), and with `run.names = "canonical"` the native keys that
        have a canonical name are not sent (the blocks carry that name).
        `eval/` keys keep their canonical twins until evaluator
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
        if self.rollout_steps:
            self.train_iter = step // self.rollout_steps
        elif iter_key is not None:
            value = key_values.get(iter_key)
            if value is not None:
                self.train_iter = value
        steps = {"env_steps": step} if self.train_iter is None else {"env_steps": step, "train_iter": self.train_iter}
        values, exclusions = dict(key_values), dict(key_excluded)
        if not _PLAIN.issuperset(map(type, values.values())):  # checked in C: usually all plain
            for key in [key for key, value in values.items() if type(value) not in _PLAIN]:
                if not excluded(exclusions.get(key)):
                    values[key] = self._own_copy(key, values[key], steps)
        if self.stages is not None and ALGORITHM_DUMP_KEY in key_values:  # the algorithm's dump, not EvalCallback's
            self.stages.emit_stage(steps)
        elif self.stages is not None:  # EvalCallback's, holding the train/ values since the algorithm's last one
            self.stages.emit_learner(steps)
        covered = frozenset() if self.stages is None else frozenset(self.stages.namespaces)
        build = partial(self._events, now, values, exclusions, steps, covered)
        if self.stages is not None and self.stages.held is not None and ALGORITHM_DUMP_KEY not in key_values:
            self.stages.held.append((build, steps))  # an evaluation's dump: its evaluator block goes first, in the same table
        else:
            self.logger.emit_deferred(build)
            self.logger.dump(steps)

    def _own_copy(self, key: str, value: Any, steps: dict[str, int]) -> Any:
        """A value that is not a plain Python one, safe to read later on the
        pipeline thread: arrays and tensors copied, SB3's typed values encoded
        (`Encoded`)."""
        if isinstance(value, sb3_types()):
            return encode(self.logger, key, value, steps)
        if getattr(value, "ndim", 0):  # arrays may change after dump
            return value.detach().clone() if hasattr(value, "detach") else value.copy()
        return value

    def _events(
        self, now: float, values: dict[str, Any], exclusions: dict[str, tuple[str, ...]], steps: dict[str, int], covered: frozenset[str]
    ) -> list[Event]:  # fmt: skip
        """Pipeline thread: one `Event` per namespace and kind of one SB3 dump.
        SB3's keys whose canonical name is in a namespace `covered` by stage
        blocks keep their native names only, and are left out with `names = "canonical"`."""
        routes = self._routes.get(covered)
        if routes is None:
            routes = self._routes[covered] = {}
        buckets: dict[tuple[str, str, str], dict[str, Any]] = {}  # (namespace, kind, stage) -> data
        preaggregated: set[tuple[str, str, str]] = set()
        for key, value in values.items():
            if excluded(exclusions.get(key)):
                continue
            media_kind = None
            if type(value) is Encoded:
                media_kind, value = value.kind, value.data
                if media_kind is None:  # could not be encoded (counted in the report)
                    continue
                if media_kind == "hparams":
                    buckets.setdefault(("", "hparams", ""), {}).update(value)
                    continue
            targets = routes.get(key)
            if targets is None:
                canonical = CANONICAL.get(key, "")
                if canonical.split("/", 1)[0] not in covered:
                    targets = _route(key, self.mode)
                else:  # the block gives the canonical name: "canonical" drops the native key, other modes keep it as it is
                    targets = [] if self.mode == "canonical" else _route(key, "native")
                routes[key] = targets
            for namespace, leaf, kind, preagg, stage in targets:
                bucket = (namespace, media_kind or kind, stage)
                data = buckets.get(bucket)
                if data is None:
                    data = buckets[bucket] = {}
                data[leaf] = value
                if preagg:
                    preaggregated.add(bucket)
        run = self.logger.name
        return [
            Event(now, data, kind, namespace, dict(steps), "sb3", run=run, preaggregated=bucket in preaggregated, stage=stage)
            for bucket, data in buckets.items()
            for namespace, kind, stage in (bucket,)
        ]

    def close(self) -> None:
        """Called by SB3's `Logger.close()`; see `close_logger`."""
        if self.close_logger:
            self.logger.close()
