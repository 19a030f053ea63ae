"""DeepMind Acme -> rltrack: Acme `Logger`s that hand each record to an rltrack `Logger`.

Acme logs by calling `logger.write(dict)` on one logger per component, made by
a factory `(label, steps_key, task_instance)`; the step lives *in* the data
under `steps_key` (e.g. `actor_steps`). Three ways in:

    # 1. a factory for ExperimentConfig(logger_factory=...)-style code: one
    #    rltrack run for the whole experiment, one namespace per label
    factory = make_logger_factory("rltrack.toml")
    learner_logger = factory("learner", "learner_steps", 0)

    # 2. keep Acme's own Terminal/CSV chain and add rltrack beside it
    logger = tee(acme.utils.loggers.make_default_logger("actor"), factory("actor", "actor_steps"))

    # 3. wrap an rltrack Logger you made yourself
    logger = RLTrackLogger(rltrack.make_logger(), "learner", steps_key="learner_steps")

What a record becomes (one `Event` per `write`):

* namespace: the label, as Acme's own TensorFlow-summary logger tags
  `<label>/<key>` (`actor/episode_return`); the local run directory files the
  record under the label's stage (`actor`, `environment_loop` -> `collector`;
  `evaluator`, `eval_loop` -> `evaluator`; `learner` -> `learner`; any other
  label under itself), which is also the namespace of its canonical twins;
* step axes: `steps_key` first (the primary axis), then the other Acme counter
  keys present in the data (`actor_steps`, `learner_steps`), so a learner record
  that carries the actor count can be plotted against environment steps too.
  With `run.names = "both"` (default) each also gets its canonical axis beside
  it (`actor_steps` -> `env_steps`, `learner_steps` -> `train_iter`, the names
  the SB3 and RLlib adapters use); `"canonical"` keeps only those, `"native"`
  only Acme's. A record with none of these keys is numbered per Acme logger on
  the axis `step` (the core's rule for step-less records, but per label, so
  actor and learner counts never mix in a shared run);
* worker = `task_instance`; source = `"acme"`;
* data: every key as Acme wrote it (the step keys stay in the data too, as in
  Acme's CSV), and beside it, in the stage's namespace, canonical names from
  `CANONICAL` per `run.names`, except
  in the namespaces that get stage blocks (below), where the blocks are the
  canonical names (with `"canonical"`, native keys that have a canonical twin
  are then left to the block).

DI-engine's stage blocks (`rltrack.frameworks.stages`, recorded by
rltrack.adapters.acme.stages; not with `run.names = "native"`), from the raw
records of one logging interval:

* `collector` and `evaluator`: one record per finished episode (what
  `EnvironmentLoop.run_episode` returns): `episode_count`, `envstep_count` (the
  episodes' summed lengths), `reward_mean/std/max/min`, `each_reward`,
  `avg_envstep_per_episode`, `collect_time` / `evaluate_time` (the episodes'
  summed durations, `episode_length / steps_per_second` each) and the rates;
  the collector's running totals count this logger's episodes. The evaluator
  block also gets `train_iter` (the record's `learner_steps`, when the
  evaluator's counter shares it) and one `[INFO]` line per episode;
* `learner`: `<loss>_avg`, each loss key (`CANONICAL`'s, else any key with
  "loss" in its name) averaged over the interval's records, and `cur_lr_avg`
  from `learning_rate` / `lr` when a learner writes one;
* the interval: every `stage_every` records of that logger (`STAGE_EVERY`
  per namespace by default: 10 episodes, 100 learner records; the evaluator's
  default None means "one evaluation": an evaluator block ends when the
  training counters in its records (`actor_steps`, `learner_steps`) move on,
  i.e. at the first episode of the next evaluation), at `end_stage()`, and at
  `close()`. A block carries the steps of its last record.

The calling thread only copies the dict (shallowly: numpy scalars, arrays and
JAX arrays are converted on rltrack's pipeline thread, as Acme's own
`AsyncLogger` does; do not mutate an array in place after writing it), looks up
the step keys, counts the record towards its stage and hands the rest to
rltrack's pipeline thread (`Logger.emit_deferred`): renaming, taking the values
into the stage and computing the blocks happen there, in order with
everything else written.

Acme need not be installed to import this package. When it is importable,
`RLTrackLogger` and the `tee` wrapper are registered as virtual subclasses of
`acme.utils.loggers.base.Logger` (an `abc.ABC`) the first time one is built, so
`isinstance(x, acme.utils.loggers.Logger)` holds wherever Acme checks it. That
is the clean way to "subclass when available": a real subclass would need the
Acme class at import time, and importing `acme` imports `launchpad`, which is
not installable on Python >= 3.11. Acme's `Logger` base defines no behaviour of
its own (only abstract `write`/`close`), so nothing is lost.

This package is all rltrack knows of Acme, a module per job: `logger` (the
Acme loggers, the factory, `tee`), `stages` (DI-engine's blocks from a
logger's records), `keys` (what Acme's labels, counters and keys mean); and
here, its public names and its declaration (`LIBRARY`, registered in the
entry-point group `rltrack.libraries`). The loggers' names (numpy, rltrack's
training side) are imported on first use, so that reading the declaration
imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltrack.adapters.acme.keys import CANONICAL
from rltrack.adapters.on_access import names_on_access
from rltrack.frameworks.library import Library

if TYPE_CHECKING:
    from rltrack.adapters.acme.logger import RLTrackLogger, RLTrackLoggerFactory, TeeLogger, make_logger_factory, tee

#: DeepMind Acme, through its loggers' `write(data)`.
LIBRARY = Library(adapter=True, canonical=CANONICAL)


#: The loggers' names, imported on first use (`from rltrack.adapters.acme import make_logger_factory`).
__getattr__ = names_on_access(__name__, dict.fromkeys(("RLTrackLogger", "RLTrackLoggerFactory", "TeeLogger", "make_logger_factory", "tee"), "rltrack.adapters.acme.logger"))

__all__ = ["CANONICAL", "LIBRARY", "RLTrackLogger", "RLTrackLoggerFactory", "TeeLogger", "make_logger_factory", "tee"]
