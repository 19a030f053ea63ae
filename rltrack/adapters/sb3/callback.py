"""SB3's callback and `attach`: how rltrack joins a model's SB3 logger, records
its hyperparameters and writes its checkpoints (the package's docstring,
rltrack.adapters.sb3, says what arrives in rltrack).

`RLTrackWriter` and `RLTrackCallback` are built from their bodies
(`WriterBody`, `CallbackBody`) and SB3's own base classes on first use, so
that this module imports without SB3.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import types
import warnings
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltrack.adapters.sb3.checkpoints import axis_options, di_checkpoint, zip_beside
from rltrack.adapters.sb3.hparams import model_hparams
from rltrack.adapters.sb3.stages import LAST_CHECKPOINT, StageRecorder, eval_callbacks, observe_evaluations, recorder_for
from rltrack.adapters.sb3.writer import WriterBody
from rltrack.core.optional import require

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import KVWriter

    from rltrack.training.logger import Logger


# ---- the callback ----------------------------------------------------------

_HPARAMS_SENT: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


class CallbackBody:
    """The body of `RLTrackCallback` (which adds SB3's `BaseCallback` as a base class).

    Where you put it decides what it does, as with SB3's own callbacks:

    * In `model.learn(callback=...)` (alone or in a list): at the start of each
      `learn()` it adds an `RLTrackWriter` to the model's SB3 logger (unless
      one for this rltrack logger is there already, e.g. from `attach`; pass
      `attach=False` to skip), records `model_hparams(model)` with
      `log_hparams` and framework details with `set_run_info`; with
      `save_freq=N` it saves the model every N calls (like SB3's
      `CheckpointCallback`: with k envs that is every N*k timesteps) and
      writes it as `ckpt/iteration_<train_iter>.pth.tar`.
    * As an `EvalCallback`'s `callback_on_new_best` (or `callback_after_eval`):
      when the evaluation found a new best mean reward it saves the model as
      `ckpt/iteration_<train_iter>.pth.tar` and `ckpt/ckpt_best.pth.tar`
      (`log_checkpoint(..., metric=best_mean_reward)`); that evaluation's
      evaluator block names it in `ckpt_name`. It also attaches the writer and
      records hyperparameters, so this position alone is enough.

    Checkpoints are laid out as DI-engine's learner writes them: the
    `.pth.tar` is a dict for `torch.load` (`model`, `optimizer`, `last_iter`,
    `last_step`; see `di_checkpoint`), named by `train_iter` as DI-engine
    names them by its learner iteration, and SB3's own zip (`model.save`)
    lies beside it as `iteration_<train_iter>.zip` / `ckpt_best.zip` for
    `PPO.load`. As in SB3's `CheckpointCallback`, both are written on the
    training thread before the call returns.
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
        self._recorder: StageRecorder | None = None
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
            writer = add_writer(self.model.logger, self.rltrack_logger, writer=_attached(self.model, self.rltrack_logger), **axis_options(self.model))
        if self.stages:
            self._start_stages(writer)
        if self.log_hparams:
            record_hparams(self.model, self.rltrack_logger)

    def _start_stages(self, writer: Any) -> None:
        """Shares one stage recorder per rltrack logger and model. Below an
        EvalCallback: observes its evaluations. In `learn()`: records every
        step (see `StageRecorder`) and finds the EvalCallbacks of the same
        `learn()` at training start."""
        recorder = recorder_for(self.rltrack_logger, self.model, self.buffer_seconds)
        if writer is not None:
            recorder.writer = writer
        if self._below_eval():
            observe_evaluations(self.parent, self.rltrack_logger)
        elif self.parent is None:
            self._recorder = recorder
            recorder.fed_by_callback = True
            if writer is not None:
                writer.use_stages(recorder)

    def _on_training_start(self) -> None:
        if self._recorder is not None:
            for eval_callback in eval_callbacks(self.locals.get("callback")):
                observe_evaluations(eval_callback, self.rltrack_logger)

    def _on_rollout_start(self) -> None:
        if self._recorder is not None:
            self._recorder.rollout_start()

    def _on_rollout_end(self) -> None:
        if self._recorder is not None:
            self._recorder.rollout_end()

    def _below_eval(self) -> bool:
        return self.parent is not None and hasattr(self.parent, "best_mean_reward")  # an EvalCallback

    def _on_step(self) -> bool:
        if self._recorder is not None:  # SB3 stores this step's transitions after its callbacks
            self._recorder.step(self.locals.get("infos"), stored_envsteps=self.num_timesteps - self.model.n_envs)
        if self._below_eval():
            best = float(self.parent.best_mean_reward)
            if best > self.best_logged:
                self.best_logged = best
                self._checkpoint(metric=best)
        elif self.save_freq and self.n_calls % self.save_freq == 0:
            self._checkpoint(metric=None)
        return True

    def _checkpoint(self, metric: float | None) -> None:
        """`ckpt/iteration_<train_iter>.pth.tar` as DI-engine writes it (see
        `di_checkpoint`), SB3's own zip beside it as `iteration_<train_iter>.zip`
        (and `ckpt_best.zip` beside `ckpt_best.pth.tar`), all before returning."""
        if self._staging is None:
            self._staging = Path(tempfile.mkdtemp(prefix="rltrack-sb3-"))
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._staging, True)
        path = self._staging / f"model_{self.num_timesteps}_{self.n_calls}.zip"
        self.model.save(path)
        try:
            state = di_checkpoint(self.model)
            written = self.rltrack_logger.log_checkpoint(state, iteration=state["last_iter"], metric=metric)  # saved before it returns
            if written is not None:
                try:
                    zip_beside(self.rltrack_logger.run_dir / written, path, may_be_best=metric is not None)
                except OSError as exc:  # the checkpoint itself is written; training goes on
                    self.rltrack_logger.report.count("dropped", f"SB3 zip beside a checkpoint not written ({type(exc).__name__})", section="sb3")
        finally:
            path.unlink(missing_ok=True)
        if written is not None:
            LAST_CHECKPOINT[self.rltrack_logger] = written
        if self.verbose >= 2:
            best = "" if metric is None else f" (best mean reward {metric:.3g})"
            print(f"rltrack: checkpoint at {self.num_timesteps} timesteps{best}")

    def _on_training_end(self) -> None:
        if self._cleanup is not None:
            self._cleanup()  # removes the staging directory
            self._cleanup = None
            self._staging = None


def record_hparams(model: Any, logger: Logger) -> None:
    """Sends `model_hparams(model)` to `logger` (`log_hparams`) and the framework
    to its run info, unless this logger got the same ones already (from another
    callback of ours, or from `attach`'s hook at the start of the same `learn()`)."""
    hparams = model_hparams(model)
    if _HPARAMS_SENT.get(logger) != hparams:
        _HPARAMS_SENT[logger] = hparams
        logger.log_hparams(hparams)
        logger.set_run_info({"framework": "stable-baselines3", "sb3_version": hparams["sb3_version"], "algo": hparams["algo"]})


# ---- SB3-dependent classes, built on first use ------------------------------

_CLASSES: dict[str, type] = {}


def _classes() -> dict[str, type]:
    if not _CLASSES:
        purpose = "rltrack's SB3 adapter (rltrack.adapters.sb3)"
        sb3_logger = require("stable_baselines3.common.logger", "sb3", purpose)
        sb3_callbacks = require("stable_baselines3.common.callbacks", "sb3", purpose)
        for name, impl, base in (
            ("RLTrackWriter", WriterBody, sb3_logger.KVWriter),
            ("RLTrackCallback", CallbackBody, sb3_callbacks.BaseCallback),
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

    class RLTrackWriter(WriterBody, KVWriter):
        """An SB3 `KVWriter` sending every dump to an rltrack `Logger`."""

    class RLTrackCallback(CallbackBody, BaseCallback):
        """Hyperparameters and checkpoints of an SB3 model, to an rltrack `Logger`."""


#: The writer `attach` made for each model, per rltrack logger.
_WRITERS: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()


def _attached(model: Any, logger: Logger) -> Any:
    """The writer `attach(model, logger)` made, or None."""
    return next((w for w in _WRITERS.get(model, ()) if w.logger is logger), None)


def add_writer(sb3_logger: Any, logger: Logger, *, writer: Any = None, **writer_options: Any) -> Any:
    """Appends `writer` (default: a new `RLTrackWriter(logger, **writer_options)`)
    to `sb3_logger.output_formats`, unless one for the same rltrack logger is
    there already; returns the writer that is there."""
    writer_cls = _classes()["RLTrackWriter"]
    for existing in sb3_logger.output_formats:
        if isinstance(existing, writer_cls) and existing.logger is logger:
            return existing
    if writer is None:
        writer = writer_cls(logger, **writer_options)
    sb3_logger.output_formats.append(writer)
    return writer


def attach(
    model: BaseAlgorithm, logger: Logger, *, stages: bool = True, buffer_seconds: float = 60.0, log_hparams: bool = True, **writer_options: Any
) -> Any:
    """Adds an `RLTrackWriter` to `model`'s SB3 logger and returns the writer;
    with `log_hparams` (default) the model's hyperparameters are recorded at
    the first step of each `learn()` (`record_hparams`, as `RLTrackCallback`
    records them; sent again only when they changed, e.g. `total_timesteps`).

    If the model has a logger set with `model.set_logger(...)`, the writer is
    appended to it now and its own outputs stay as they are. Otherwise SB3
    builds its default logger inside each `learn()` (stdout, and TensorBoard
    under `tensorboard_log/<tb_log_name>_<n>` with the `tb_log_name` given to
    `learn()`), and the writer joins it there: a hook on the model's VecEnv
    (an attribute of that env object, not a wrapper) appends the writer to
    whatever logger the model holds at each step, before any dump. So a
    logger set later with `model.set_logger(configure(...))` gets the writer
    too. A model without an env cannot be hooked: `attach` raises (set the
    env first, or pass `RLTrackCallback(logger)` to `learn()`).
    """
    _classes()
    env = getattr(model, "env", None)
    if env is None:
        raise ValueError(
            "attach(model, logger): the model has no env yet, and rltrack follows the model's SB3 logger through its env; "
            "call model.set_env(env) first, or pass RLTrackCallback(logger) to model.learn()"
        )
    writer = _attached(model, logger)
    if writer is None:
        options = {**axis_options(model), **writer_options}
        writer = _classes()["RLTrackWriter"](logger, **options)
        _WRITERS.setdefault(model, []).append(writer)
    if getattr(model, "_custom_logger", False):
        add_writer(model.logger, logger, writer=writer)
    recorder = None
    if stages:
        recorder = recorder_for(logger, model, buffer_seconds)
        recorder.writer = writer
        writer.use_stages(recorder)
    _observe_steps(env, model, writer, recorder, log_hparams)
    return writer


def _observe_steps(venv: Any, model: Any, writer: Any, recorder: StageRecorder | None, log_hparams: bool) -> None:
    """The hook of `attach` on `venv.step_wait`: at each step, adds `writer`
    to the model's SB3 logger when that logger is new (SB3 builds one per
    `learn()`; a user may set another), records the hyperparameters at the
    first step of each `learn()` (`log_hparams`), and hands the step's infos to the
    stage recorder unless an `RLTrackCallback` feeds it. The hook is an
    attribute of this one VecEnv object, not a wrapper: the model's env keeps
    its type and its wrapper chain, which SB3 walks side by side with the eval
    env's (`EvalCallback`'s type check, `sync_envs_normalization` copying
    `VecNormalize` statistics level by level)."""
    seen: list[Any] = [None, None]  # the model's SB3 logger; its `start_time`, set anew by each `learn()`

    def on_step(infos: Any) -> None:
        sb3_logger = vars(model).get("_logger")
        if sb3_logger is not seen[0] and sb3_logger is not None:
            seen[0] = sb3_logger
            add_writer(sb3_logger, writer.logger, writer=writer)
        if log_hparams and model.start_time and seen[1] != model.start_time:  # 0.0 until a learn() began (an evaluation before)
            seen[1] = model.start_time
            record_hparams(model, writer.logger)
        if recorder is not None and not recorder.fed_by_callback:
            recorder.observed_step(infos)

    if "_rltrack_on_step" not in vars(venv):
        step_wait = venv.step_wait

        def observed_step_wait() -> Any:
            result = step_wait()
            venv._rltrack_on_step(result[3])
            return result

        venv.step_wait = observed_step_wait
    venv._rltrack_on_step = on_step
