"""What rltrack knows about Ray Tune and RLlib results, as data and pure
functions: the bookkeeping keys (run metadata, not metrics), Tune's timing
keys, the step axes (`training_iteration`, the env step counters), and the
canonical (DI-engine) names of RLlib's new API stack keys.

The callback, the declaration (its `CANONICAL`) and the reader of Tune's
trial directories (rltrack.adapters.tune.folders) read it here. What one
result dict becomes (its events and DI-engine's stage blocks) is
rltrack.adapters.tune.results.
"""

from __future__ import annotations

from typing import Any, Mapping


SOURCE_RLLIB = "rllib"
SOURCE_TUNE = "tune"

#: Tune's `storage_path` when a sweep names none (ray.train.constants.DEFAULT_STORAGE_PATH):
#: this machine's own folder, which the adapter does not take as run.storage.
DEFAULT_STORAGE_PATH = "~/ray_results"

#: native flat key of RLlib's new API stack -> canonical flat key (DI-engine vocabulary).
#: Learner keys are given for the default module; other modules follow the same
#: table under `learner/<module>/` (see `canonical_name`).
CANONICAL: dict[str, str] = {
    "env_runners/episode_return_mean": "collector/reward_mean",
    "env_runners/episode_return_max": "collector/reward_max",
    "env_runners/episode_return_min": "collector/reward_min",
    "env_runners/episode_len_mean": "collector/avg_envstep_per_episode",
    "env_runners/num_episodes": "collector/episode_count",
    "env_runners/num_env_steps_sampled": "collector/envstep_count",
    "env_runners/num_episodes_lifetime": "collector/total_episode_count",
    "env_runners/num_env_steps_sampled_lifetime": "collector/total_envstep_count",
    "evaluation/env_runners/episode_return_mean": "evaluator/reward_mean",
    "evaluation/env_runners/episode_return_max": "evaluator/reward_max",
    "evaluation/env_runners/episode_return_min": "evaluator/reward_min",
    "evaluation/env_runners/episode_len_mean": "evaluator/avg_envstep_per_episode",
    "evaluation/env_runners/num_episodes": "evaluator/episode_count",
    "evaluation/env_runners/num_env_steps_sampled": "evaluator/envstep_count",
    "learners/default_policy/total_loss": "learner/total_loss_avg",
    "learners/default_policy/policy_loss": "learner/policy_loss_avg",
    "learners/default_policy/vf_loss": "learner/value_loss_avg",
    "learners/default_policy/qf_loss": "learner/critic_loss_avg",  # DQN, SAC
    "learners/default_policy/entropy": "learner/entropy_avg",
    "learners/default_policy/mean_kl_loss": "learner/approx_kl_avg",  # PPO
    "learners/default_policy/default_optimizer_learning_rate": "learner/cur_lr_avg",
}

DEFAULT_MODULE = "default_policy"
LEARNER_TAILS = {
    native[len(f"learners/{DEFAULT_MODULE}/") :]: canonical[len("learner/") :]
    for native, canonical in CANONICAL.items()
    if native.startswith(f"learners/{DEFAULT_MODULE}/")
}

#: Tune's (and RLlib's) bookkeeping: run metadata (meta.json "info"), not metrics.
RUN_INFO_KEYS = frozenset(
    {
        "trial_id",
        "experiment_id",
        "experiment_tag",
        "hostname",
        "node_ip",
        "pid",
        "date",
        "timestamp",
        "done",
        "should_checkpoint",
        "checkpoint_dir_name",
        "iterations_since_restore",
        "timesteps_since_restore",
        "__duplicate__",
        "__trial_info__",
    }
)

#: Tune's own durations (seconds): `timing` events.
#: Tune's duration of each iteration; `time_total_s` and `time_since_restore` are running clocks, kept as scalars.
TIMING_KEYS = frozenset({"time_this_iter_s"})

#: The train_iter axis.
ITERATION_KEY = "training_iteration"

#: Candidates for the env_steps axis, first present wins (flat keys).
ENV_STEP_KEYS = ("env_runners/num_env_steps_sampled_lifetime", "num_env_steps_sampled_lifetime", "timesteps_total")

HPARAMS_KEY = "config"

#: Where the adapter's RLlib callback `record_episodes` puts each finished
#: episode, inside RLlib's `env_runners` metrics: (folder, return key, length key).
EPISODE_SERIES = ("rltrack", "episode_return", "episode_length")


def canonical_name(native: str) -> str | None:
    """The canonical flat name of an RLlib flat key, or None."""
    canonical = CANONICAL.get(native)
    if canonical is not None:
        return canonical
    if native.startswith("learners/"):
        parts = native.split("/")
        if len(parts) == 3 and parts[1] not in (DEFAULT_MODULE, "__all_modules__"):
            tail = LEARNER_TAILS.get(parts[2])
            if tail is not None:
                return f"learner/{parts[1]}/{tail}"
    return None


def is_rllib_result(result: Mapping[str, Any]) -> bool:
    """True for a result of RLlib's new API stack (it has `env_runners` or `learners`)."""
    return "env_runners" in result or "learners" in result
