"""What TensorBoard's own tags mean, whoever writes them, as data: DI-engine's
twin tags (rltrack's own DI layout writes them too), the text and HParams
tags that carry hyperparameters, the log directory endings below the folder
that names a run, and the writers' own packages. What one library's tags mean
is in its declaration (rltrack.frameworks.library); the translation of a
writer's events (rltrack.frameworks.tensorboard) reads both.
"""

from __future__ import annotations

import re

from rltrack.frameworks.stages import ITER_AXIS, STEP_AXIS

#: The axis of DI-engine's `<stage>_sec/<key>` throughput tables: the table's number in the file.
PERIOD_AXIS = "period"
#: DI-engine/LightZero: every value twice, `<stage>_iter/<key>` (train_iter) and
#: `<stage>_step/<key>` (env steps): the halves of a twin and the axis each is written against.
TWIN_AXES = {"iter": ITER_AXIS, "step": STEP_AXIS}
#: A buffer's throughput tables: `<stage>_sec/<key>`, at the table's number in the file (`PERIOD_AXIS`).
THROUGHPUT_HALF = "sec"
TWIN_TAG = re.compile(rf"^(?P<stage>[A-Za-z][A-Za-z0-9]*)_(?P<axis>{'|'.join([*TWIN_AXES, THROUGHPUT_HALF])})/(?P<key>.+)$")


def twin_prefix(stage: str, half: str) -> str:
    """The tag prefix of `stage`'s values written against `half` (a key of
    `TWIN_AXES`, or `THROUGHPUT_HALF`), as DI-engine writes it: `collector_iter/`.
    rltrack's own DI layout (rltrack.sinks.tfevents) writes with it, the
    translation (rltrack.frameworks.tensorboard) reads `TWIN_TAG`."""
    return f"{stage}_{half}/"


#: The tags of CleanRL's hyperparameter table (`add_text("hyperparameters", ...)`) as written.
HPARAMS_TEXT_TAGS = frozenset({"hyperparameters/text_summary", "hyperparameters"})
#: The suffix torch's and tensorboardX's `add_text` put after the tag.
TEXT_SUFFIX = "/text_summary"
#: HF's TrainingArguments, as transformers' TensorBoard callback writes them (`add_text("args", <JSON>)`).
HF_ARGS_TAG = "args" + TEXT_SUFFIX
#: rl_games' fixed folder of event files, `<train_dir>/<experiment name>/summaries`.
RL_GAMES_SUMMARIES = "summaries"
#: The HParams plugin's tags; only the session start holds the values.
HPARAMS_PREFIX = "_hparams_/"
HPARAMS_SESSION_START = "_hparams_/session_start_info"

#: Log directory endings below the folder that names the run: DI-engine and
#: LightZero write `./<exp_name>/log/serial`.
LOGDIR_TAILS: tuple[tuple[str, ...], ...] = (("log", "serial"),)

#: Folders of event files found on disk, whose writer is gone: library -> (the
#: name its runs' folders get, an entry it writes beside the event files or "").
#: CleanRL's `runs/{env_id}__{exp_name}__{seed}__{int(time.time())}`; skrl's
#: `<yy-mm-dd_HH-MM-SS-ffffff>_<Agent>` with `checkpoints/`; rsl_rl's (Isaac
#: Lab's) `<YYYY-MM-DD_HH-MM-SS>[_<name>]` with the `git/` diffs it stores;
#: Tianshou 2's `exp_seed=<n>`. DI-engine's is its `log/serial` (`LOGDIR_TAILS`).
FOLDERS: dict[str, tuple[str, str]] = {
    "cleanrl": (r".+__.+__\d+__\d{9,}", ""),
    "skrl": (r"\d{2,4}-\d\d-\d\d_\d\d-\d\d-\d\d(-\d+)?_.+", "checkpoints"),
    "rsl_rl": (r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d(_.+)?", "git"),
    "tianshou": (r"exp_seed=\d+", ""),
}
#: Packages of the writers themselves, passed over when looking for the code calling one.
WRITER_PACKAGES = ("tensorboard", "tensorboardX", "torch.utils.tensorboard", "rltrack")
