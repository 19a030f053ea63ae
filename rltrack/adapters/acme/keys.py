"""What rltrack knows about Acme, as data and pure functions: which namespace
a logger label means, the step counters and their axes, the canonical
(DI-engine) names of its keys, how many records make one stage block, and
how an interval's records become DI-engine's collector, evaluator and
learner blocks (the arithmetic itself is rltrack.frameworks.stages).

The loggers (rltrack.adapters.acme.logger), their stages
(rltrack.adapters.acme.stages) and the declaration (its `CANONICAL`) read it here.
"""

from __future__ import annotations

from typing import Any

from rltrack.frameworks.stages import CollectorStats, evaluator_block, evaluator_info_lines

SOURCE = "acme"

#: Acme label -> rltrack namespace; labels not listed are kept as given.
LABEL_NAMESPACES: dict[str, str] = {
    "actor": "collector",
    "environment_loop": "collector",
    "evaluator": "evaluator",
    "eval_loop": "evaluator",
    "learner": "learner",
}

#: Acme counter keys that are step axes whenever present, with their canonical axis names.
STEP_AXES: dict[str, str] = {"actor_steps": "env_steps", "learner_steps": "train_iter"}

#: native flat key (`<namespace>/<Acme key>`) -> canonical flat key (DI-engine vocabulary).
#: Acme's environment loop writes one record per episode, so an episode's return
#: is that record's `reward_mean`; learners write one record per SGD step.
CANONICAL: dict[str, str] = {
    "collector/episode_return": "collector/reward_mean",
    "collector/episode_length": "collector/avg_envstep_per_episode",
    "collector/steps_per_second": "collector/avg_envstep_per_sec",
    "collector/actor_episodes": "collector/total_episode_count",
    "collector/actor_steps": "collector/total_envstep_count",
    "evaluator/episode_return": "evaluator/reward_mean",
    "evaluator/episode_length": "evaluator/avg_envstep_per_episode",
    "evaluator/steps_per_second": "evaluator/avg_envstep_per_sec",
    "learner/total_loss": "learner/total_loss_avg",  # SAC, ValueDICE
    "learner/loss_total": "learner/total_loss_avg",  # PPO
    "learner/loss": "learner/total_loss_avg",  # DQN, BC, R2D2, IMPALA, ...
    "learner/loss_policy": "learner/policy_loss_avg",  # PPO
    "learner/policy_loss": "learner/policy_loss_avg",  # D4PG, SAC, MPO, ...
    "learner/loss_value": "learner/value_loss_avg",  # PPO
    "learner/critic_loss": "learner/critic_loss_avg",  # D4PG, TD3, SAC, ...
}

#: Records per stage block, per namespace (None: the evaluator's one evaluation, see the package docstring, rltrack.adapters.acme).
STAGE_EVERY: dict[str, int | None] = {"collector": 10, "evaluator": None, "learner": 100}
#: Learner keys read as the learning rate (`cur_lr_avg`).
LEARNING_RATE_KEYS = ("learning_rate", "lr")


def namespace_for(label: str) -> str:
    """The rltrack namespace of an Acme logger label."""
    return LABEL_NAMESPACES.get(label, label)


def axes(steps_key: str | None, mode: str) -> list[tuple[str, str]]:
    """(data key, axis name) pairs in axis order: `steps_key` first, then the
    known counters; each counter under its own name, its canonical axis or
    both, per the `run.names` `mode`."""
    keys = ([steps_key] if steps_key else []) + [k for k in STEP_AXES if k != steps_key]
    pairs: list[tuple[str, str]] = []
    for key in keys:
        canonical = STEP_AXES.get(key)
        names = [key] if mode != "canonical" or canonical is None else []
        if canonical is not None and mode != "native":
            names.append(canonical)
        pairs += [(key, name) for name in names if name not in {axis for _, axis in pairs}]
    return pairs


def renames(namespace: str, mode: str) -> list[tuple[str, str]]:
    """(Acme key, canonical key) pairs that apply inside `namespace`."""
    if mode == "native":
        return []
    pairs = []
    for native, canonical in CANONICAL.items():
        native_ns, _, key = native.partition("/")
        canonical_ns, _, canonical_key = canonical.partition("/")
        if native_ns == namespace and canonical_ns == namespace:
            pairs.append((key, canonical_key))
    return pairs


#: Acme learner key -> the learner block's name for it, without `_avg` (`loss_total` -> `total_loss`).
LEARNER_NAMES: dict[str, str] = {
    native.partition("/")[2]: canonical.partition("/")[2][: -len("_avg")] for native, canonical in CANONICAL.items() if native.startswith("learner/")
}


def learner_name(key: str) -> str | None:
    """The learner block's name (without `_avg`) for an Acme learner key: its
    canonical loss name, `cur_lr` for a learning rate, the key itself for any
    other key with "loss" in it; None for keys the block does not average."""
    name = LEARNER_NAMES.get(key)
    if name is None and key in LEARNING_RATE_KEYS:
        return "cur_lr"
    if name is None and "loss" in key:
        return key
    return name


def episode_block(
    namespace: str, collector: CollectorStats, rewards: list[float], lengths: list[float] | None, duration: float | None, train_iter: Any
) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """The collector or evaluator block of one interval's finished episodes
    (one Acme record each), and the evaluator's `[INFO]` lines. `lengths` and
    `duration` are None once a record lacked them; the collector's running
    totals live in `collector`; `train_iter` is the evaluator's learner count."""
    if namespace == "collector":
        envsteps = None if lengths is None else int(sum(lengths))
        return collector.stage(episode_rewards=rewards, episode_lengths=lengths, envstep_count=envsteps, duration=duration), []
    block = evaluator_block(episode_rewards=rewards, episode_lengths=lengths, duration=duration, train_iter=None if train_iter is None else int(train_iter))
    return block, evaluator_info_lines(rewards)
