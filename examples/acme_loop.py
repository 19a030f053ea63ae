"""Acme's EnvironmentLoop logging through rltrack, beside Acme's own terminal logger.

A tabular Q-learning agent walks a corridor (a small `dm_env` environment):
an actor loop (label "actor", steps key "actor_steps"), the learner inside the
actor's `update()` (label "learner", "learner_steps") and a greedy evaluator
loop every few episodes (label "evaluator"). All three loggers come from one
`make_logger_factory(...)`, so they share one rltrack run: namespaces
collector / learner / evaluator, actor_steps and learner_steps as step axes,
and DI-engine's blocks in log/<namespace>/<namespace>_logger.txt: a collector
block per 10 episodes, an evaluator block per evaluation (3 episodes, with an
[INFO] line each), a learner block of averaged losses per 100 learner
records (one record per 25 updates here) and at the end.
`acme_factory=` keeps Acme's default terminal logger printing as usual.

    python examples/acme_loop.py --episodes 300
    tensorboard --logdir runs/acme_corridor/log/serial

dm-acme 0.4.0 on Python >= 3.11 is installed with `--no-deps` and `import acme`
then fails on `launchpad`; this example falls back to the no-op stand-in in
tests/helpers/standins (and says so) when launchpad is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

if importlib.util.find_spec("launchpad") is None:
    print("note: launchpad is not installed; using the no-op stand-in from tests/helpers/standins (single process only)", file=sys.stderr)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "helpers" / "standins"))

import acme  # noqa: E402
import dm_env  # noqa: E402
from acme import core, specs  # noqa: E402
from acme.utils import counting, loggers  # noqa: E402

from rltrack.adapters.acme import make_logger_factory  # noqa: E402


class Corridor(dm_env.Environment):
    """Cells 0..length; action 1 moves right, 0 left; +1 at the end, -0.01 a step, 50 steps at most."""

    def __init__(self, length: int = 8) -> None:
        self.length = length
        self._pos = 0
        self._t = 0

    def reset(self) -> dm_env.TimeStep:
        self._pos, self._t = 0, 0
        return dm_env.restart(np.int32(self._pos))

    def step(self, action: np.ndarray) -> dm_env.TimeStep:
        self._t += 1
        self._pos = min(self.length, max(0, self._pos + (1 if int(action) == 1 else -1)))
        if self._pos == self.length:
            return dm_env.termination(np.float32(1.0), np.int32(self._pos))
        if self._t >= 50:
            return dm_env.truncation(np.float32(-0.01), np.int32(self._pos))
        return dm_env.transition(np.float32(-0.01), np.int32(self._pos))

    def observation_spec(self) -> specs.Array:
        return specs.DiscreteArray(self.length + 1, dtype=np.int32, name="position")

    def action_spec(self) -> specs.DiscreteArray:
        return specs.DiscreteArray(2, dtype=np.int32, name="move")


class QLearningActor(core.Actor):
    """Epsilon-greedy tabular Q-learning; its update() is the learner and logs like one."""

    def __init__(self, q: np.ndarray, learner_logger: loggers.Logger | None, counter: counting.Counter | None,
                 epsilon: float = 0.2, lr: float = 0.5, gamma: float = 0.99, seed: int = 0) -> None:  # fmt: skip
        self.q = q
        self._logger = learner_logger
        self._counter = counter
        self._epsilon, self._lr, self._gamma = epsilon, lr, gamma
        self._rng = np.random.default_rng(seed)
        self._obs = 0
        self._last: tuple[int, int, float, int, bool] | None = None
        self._td_errors: list[float] = []

    def select_action(self, observation: np.ndarray) -> np.ndarray:
        if self._rng.random() < self._epsilon:
            return np.int32(self._rng.integers(2))
        row = self.q[int(observation)]
        return np.int32(self._rng.choice(np.flatnonzero(row == row.max())))

    def observe_first(self, timestep: dm_env.TimeStep) -> None:
        self._obs = int(timestep.observation)

    def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep) -> None:
        nxt = int(next_timestep.observation)
        self._last = (self._obs, int(action), float(next_timestep.reward), nxt, next_timestep.last())
        self._obs = nxt

    def update(self, wait: bool = False) -> None:
        if self._last is None or self._logger is None:
            return
        s, a, r, s2, done = self._last
        target = r + (0.0 if done else self._gamma * self.q[s2].max())
        td = target - self.q[s, a]
        self.q[s, a] += self._lr * td
        self._td_errors.append(td)
        counts = self._counter.increment(steps=1) if self._counter else {}
        if len(self._td_errors) == 25:  # one learner record per 25 updates, as learners log every so often
            errors = np.asarray(self._td_errors)
            self._logger.write({"loss": np.mean(errors**2), "td_error_max": np.abs(errors).max(), **counts})
            self._td_errors.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--root", default="runs")
    args = parser.parse_args()

    def acme_terminal(label: str, steps_key: str | None = None, task_instance: int = 0) -> loggers.Logger:
        # Acme's default chain without its CSV (save_data=False keeps ~/acme clean); prints at most once a second
        return loggers.make_default_logger(label, save_data=False, time_delta=1.0, print_fn=print, steps_key=steps_key or "steps")

    config = {"run": {"root": args.root, "name": "acme_corridor"}, "backends": {"use": ["local"]}}
    with make_logger_factory(config, acme_factory=acme_terminal) as factory:
        env = Corridor()
        q = np.zeros((env.length + 1, 2))
        parent = counting.Counter(time_delta=0.0)
        actor = QLearningActor(q, factory("learner", "learner_steps", 0), counting.Counter(parent, "learner", time_delta=0.0))
        train_loop = acme.EnvironmentLoop(env, actor, counting.Counter(parent, "actor", time_delta=0.0),
                                          factory("actor", "actor_steps", 0))  # fmt: skip
        greedy = QLearningActor(q, None, None, epsilon=0.0)
        eval_loop = acme.EnvironmentLoop(Corridor(), greedy, counting.Counter(parent, "evaluator", time_delta=0.0),
                                         factory("evaluator", "actor_steps", 0), should_update=False)  # fmt: skip
        for done in range(0, args.episodes, args.eval_every):
            train_loop.run(num_episodes=min(args.eval_every, args.episodes - done))
            eval_loop.run(num_episodes=3)
    print(f"\nrun directory: {factory.logger.run_dir}")
    print(f"counts: {parent.get_counts()}")


if __name__ == "__main__":
    main()
