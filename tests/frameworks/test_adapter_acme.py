"""The Acme adapter against real `acme.utils.loggers` classes (Terminal, CSV,
Dispatcher, NoneFilter, TimeFilter, InMemoryLogger) and a real
`acme.EnvironmentLoop`, reading back Acme's own CSV and rltrack's journal and
memory backend.

dm-acme 0.4.0 is installed with `--no-deps` on Python 3.11, and `import acme`
imports `launchpad`, which has no wheels there: when it is missing, the
stand-in in tests/helpers/standins/launchpad (a marked no-op module) is put on sys.path
before Acme is imported.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

STANDINS = Path(__file__).parents[1] / "helpers" / "standins"
if importlib.util.find_spec("launchpad") is None:
    sys.path.insert(0, str(STANDINS))

acme = pytest.importorskip("acme")
dm_env = pytest.importorskip("dm_env")
from acme import core, specs  # noqa: E402
from acme.utils import counting, loggers  # noqa: E402
from acme.utils.loggers import base as acme_base  # noqa: E402

import rltrack  # noqa: E402
from rltrack.adapters.acme import CANONICAL, RLTrackLogger, make_logger_factory, tee  # noqa: E402
from rltrack.journal import read_journal  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """No ./runs or ~/acme in the repo or home, no config leaking in from the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RLTRACK_CONFIG", raising=False)
    monkeypatch.delenv("RLTRACK_BACKENDS", raising=False)


def memory_config(tmp_path, name="acme", names="both"):
    return {"run": {"root": str(tmp_path / "runs"), "name": name, "names": names}, "backends": {"use": ["memory"]}}


def episode_records(n=6, seed=0):
    """What an Acme actor's environment loop writes: numpy values, a growing actor_steps."""
    rng = np.random.default_rng(seed)
    steps = 0
    out = []
    for i in range(n):
        length = int(rng.integers(5, 50))
        steps += length
        out.append(
            {
                "episode_length": np.int64(length),
                "episode_return": np.float32(rng.normal(10, 3)),
                "steps_per_second": np.float64(rng.uniform(1e3, 1e4)),
                "actor_episodes": i + 1,
                "actor_steps": np.int64(steps),
            }
        )
    return out


def test_module_imports_and_works_without_acme(tmp_path):
    code = f"""
import sys
sys.path = [p for p in sys.path if "standins" not in p]
import rltrack, rltrack.adapters.acme as adapter
assert "acme" not in sys.modules, "the adapter imported acme at import time"
logger = rltrack.make_logger({{"run": {{"root": {str(tmp_path)!r}, "name": "noacme"}}, "backends": {{"use": ["memory"]}}}})
ours = adapter.RLTrackLogger(logger, "learner", "learner_steps")
ours.write({{"loss": 0.5, "learner_steps": 3}})
ours.close()
logger.close()
record, block = [e for e in logger.backends["memory"].events if e.kind == "scalars"]
assert record.steps == block.steps == {{"learner_steps": 3, "train_iter": 3}}, record.steps
assert record.data == {{"loss": 0.5, "learner_steps": 3}} and block.data == {{"total_loss_avg": 0.5}}
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_our_loggers_are_acme_loggers(tmp_path):
    factory = make_logger_factory(memory_config(tmp_path))
    ours = factory("learner", "learner_steps", 0)
    assert isinstance(ours, acme_base.Logger) and isinstance(ours, loggers.Logger)
    assert isinstance(tee(loggers.NoOpLogger(), ours), loggers.Logger)
    # Acme's own wrappers take it where they expect a Logger
    chain = loggers.NoneFilter(loggers.Dispatcher([ours, loggers.InMemoryLogger()]))
    chain.write({"loss": np.float32(1.5), "learner_steps": 1, "unset": None})
    factory.close()
    record, block = factory.logger.backends["memory"].events  # the record, then the learner block at close
    assert record.data == {"loss": 1.5, "learner_steps": 1} and block.data == {"total_loss_avg": 1.5}


def test_tee_keeps_acme_csv_and_terminal_output_identical(tmp_path):
    """make_default_logger's chain (Terminal + CSV in a Dispatcher, NoneFilter,
    TimeFilter), tee'd with ours: Acme's CSV holds every record as it would
    without rltrack, and rltrack holds the same values with actor_steps as an axis."""
    printed: list[str] = []
    csv_logger = loggers.CSVLogger(str(tmp_path / "acme"), label="actor", add_uid=False)
    chain = loggers.Dispatcher([loggers.TerminalLogger("actor", print_fn=printed.append), csv_logger], loggers.to_numpy)
    chain = loggers.TimeFilter(loggers.NoneFilter(chain), time_delta=0.0)
    # the same chain without rltrack, as the reference for "unchanged"
    ref_printed: list[str] = []
    ref_csv = loggers.CSVLogger(str(tmp_path / "acme_ref"), label="actor", add_uid=False)
    ref = loggers.Dispatcher([loggers.TerminalLogger("actor", print_fn=ref_printed.append), ref_csv], loggers.to_numpy)

    factory = make_logger_factory(memory_config(tmp_path))
    logger = tee(chain, factory("actor", "actor_steps", 3))
    records = episode_records(8)
    for record in records:
        logger.write(record)
        ref.write(record)
    logger.close()
    ref.close()
    factory.close()

    with open(csv_logger.file_path) as f:
        rows = list(csv.DictReader(f))
    assert Path(csv_logger.file_path).read_text() == Path(ref_csv.file_path).read_text()
    assert printed == ref_printed and printed[0].startswith("[Actor] Actor Episodes = 1 | Actor Steps = ")
    # TimeFilter(0.0) passes writes at least one clock tick (< 1 us) apart; each write takes longer
    assert len(rows) == len(records)

    memory = factory.logger.backends["memory"]
    events = [e for e in memory.events if e.namespace == "actor" and "episode_return" in e.data]  # the label, as Acme tags it
    assert len(events) == len(records)
    for event, record in zip(events, records):
        assert event.source == "acme" and event.worker == "3" and event.kind == "scalars" and event.stage == "collector"
        assert event.steps == {"actor_steps": int(record["actor_steps"]), "env_steps": int(record["actor_steps"])}
        assert list(event.steps)[0] == "actor_steps"  # steps_key is the primary axis
        assert event.data["episode_return"] == float(record["episode_return"])
        assert "reward_mean" not in event.data  # the collector blocks carry the canonical names
    # every row of Acme's CSV is one of rltrack's records, value for value
    by_steps = {e.data["actor_steps"]: e.data for e in events}
    for row in rows:
        ours = by_steps[int(row["actor_steps"])]
        assert set(row) == {"episode_length", "episode_return", "steps_per_second", "actor_episodes", "actor_steps"}
        assert int(row["episode_length"]) == ours["episode_length"]
        assert np.float32(row["episode_return"]) == np.float32(ours["episode_return"])
        assert float(row["steps_per_second"]) == ours["steps_per_second"]
        assert int(row["actor_episodes"]) == ours["actor_episodes"]
    # and the journal on disk says the same
    journal = [e for e in read_journal(factory.logger.run_dir) if e.namespace == "actor" and "episode_return" in e.data]
    assert [e.steps["actor_steps"] for e in journal] == [int(r["actor_steps"]) for r in records]
    # blocks of 10 episodes by default: the 8 episodes are one block, sent at close
    [block] = [e for e in memory.events if e.namespace == "collector" and "reward_mean" in e.data]
    assert block.data["episode_count"] == 8 and block.steps == events[-1].steps
    assert block.data["reward_mean"] == pytest.approx(np.mean([float(r["episode_return"]) for r in records]))


def test_rltrack_sees_writes_that_acme_time_filter_drops(tmp_path):
    inner = loggers.InMemoryLogger()
    chain = loggers.TimeFilter(inner, time_delta=3600.0)
    factory = make_logger_factory(memory_config(tmp_path))
    logger = tee(chain, factory("evaluator", "actor_steps"))
    for record in episode_records(5):
        logger.write(record)
    factory.close()
    assert len(inner.data) == 1  # Acme's chain: unchanged behaviour
    events = [e for e in factory.logger.backends["memory"].events if e.kind == "scalars"]
    assert {e.namespace for e in events} == {"evaluator"}
    assert len([e for e in events if "episode_return" in e.data]) == 5
    # actor_steps moves on at every record: each episode is its own evaluation, hence its own block
    assert [e.data["episode_count"] for e in events if "reward_mean" in e.data] == [1] * 5


class RandomActor(core.Actor):
    """A uniformly random policy: enough to drive acme.EnvironmentLoop."""

    def __init__(self, num_actions: int, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)
        self._n = num_actions

    def select_action(self, observation):
        return np.int32(self._rng.integers(self._n))

    def observe_first(self, timestep):
        pass

    def observe(self, action, next_timestep):
        pass

    def update(self, wait: bool = False):
        pass


class Corridor(dm_env.Environment):
    """A corridor of `length` cells; action 1 walks right, reward 1 at the end, 30-step limit."""

    def __init__(self, length: int = 4) -> None:
        self._length = length
        self._pos = 0
        self._t = 0

    def reset(self):
        self._pos, self._t = 0, 0
        return dm_env.restart(np.float32([self._pos]))

    def step(self, action):
        self._t += 1
        self._pos = max(0, self._pos + (1 if int(action) == 1 else -1))
        obs = np.float32([self._pos])
        if self._pos >= self._length:
            return dm_env.termination(np.float32(1.0), obs)
        if self._t >= 30:
            return dm_env.truncation(np.float32(0.0), obs)
        return dm_env.transition(np.float32(0.0), obs)

    def observation_spec(self):
        return specs.Array((1,), np.float32)

    def action_spec(self):
        return specs.DiscreteArray(2, dtype=np.int32)


def test_real_environment_loop_through_factory_tee_with_acme_default_logger(tmp_path):
    printed: list[str] = []

    def acme_factory(label, steps_key=None, task_instance=0):
        return loggers.make_default_logger(label, save_data=False, time_delta=0.0, print_fn=printed.append, steps_key=steps_key or "steps")

    with make_logger_factory(memory_config(tmp_path), acme_factory=acme_factory) as factory:
        counter = counting.Counter(prefix="actor")
        loop = acme.EnvironmentLoop(Corridor(), RandomActor(2), counter=counter, logger=factory("actor", "actor_steps", 0))
        loop.run(num_episodes=5)
    assert printed and printed[0].startswith("[Actor] ")
    *events, block = [e for e in factory.logger.backends["memory"].events if e.kind == "scalars"]
    assert len(events) == 5
    steps = [e.steps["actor_steps"] for e in events]
    assert steps == sorted(steps) and steps[-1] == counter.get_counts()["actor_steps"]
    assert [e.data["actor_episodes"] for e in events] == [1, 2, 3, 4, 5]
    assert all(e.steps["env_steps"] == e.steps["actor_steps"] for e in events)
    lengths = [e.data["episode_length"] for e in events]
    assert np.cumsum(lengths).tolist() == steps
    assert block.data["episode_count"] == 5 and block.data["envstep_count"] == steps[-1]  # the block, at close
    histogram = next(e for e in factory.logger.backends["memory"].events if e.kind == "histogram")
    assert histogram.data["each_reward"] == [e.data["episode_return"] for e in events]
    meta = json.loads((factory.logger.run_dir / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["info"]["framework"] == "acme"


def test_factory_called_as_acme_experiments_call_it_shares_one_run(tmp_path):
    factory = make_logger_factory(memory_config(tmp_path, name="exp"))
    # as ExperimentConfig / run_experiment call logger_factory: positional (label, steps_key, task_instance)
    learner = factory("learner", "learner_steps", 0)
    actors = [factory("actor", "actor_steps", i) for i in range(2)]
    evaluator = factory("evaluator", "actor_steps", 0)
    replay = factory(label="replay")
    keyword = factory("actor", steps_key="actor_steps", instance=7)  # later Acme's LoggerFactory protocol
    assert len({id(x.logger) for x in (learner, *actors, evaluator, replay, keyword)}) == 1
    for i in range(3):
        learner.write({"loss": np.float32(1.0 / (i + 1)), "learner_steps": np.int64(i + 1), "actor_steps": 100 * i, "learner_walltime": 0.1 * i})
        for actor in actors:
            actor.write({"episode_return": float(i), "actor_steps": 100 * i})
        replay.write({"size": 10 * i})
    evaluator.write({"episode_return": 3.0, "actor_steps": 200, "evaluator_episodes": 1})
    keyword.write({"episode_return": 1.0, "actor_steps": 5})
    factory.close()

    journal = list(read_journal(factory.logger.run_dir))
    assert len(list((tmp_path / "runs").iterdir())) == 1
    *learner_events, learner_block = [e for e in journal if e.namespace == "learner" and e.kind == "scalars"]
    assert [e.steps for e in learner_events] == [
        {"learner_steps": i + 1, "train_iter": i + 1, "actor_steps": 100 * i, "env_steps": 100 * i} for i in range(3)
    ]
    losses = [float(np.float32(1.0 / (i + 1))) for i in range(3)]
    assert [e.data["loss"] for e in learner_events] == losses
    assert learner_block.data == {"total_loss_avg": pytest.approx(np.mean(losses))}  # the interval's average, at close
    assert learner_block.steps == learner_events[-1].steps
    assert sorted({e.worker for e in journal if e.stage == "collector" and "episode_return" in e.data}) == ["0", "1", "7"]
    ev, block = [e for e in journal if e.filed_under == "evaluator" and e.kind == "scalars"]
    assert ev.steps == block.steps == {"actor_steps": 200, "env_steps": 200}
    assert ev.data["episode_return"] == block.data["reward_mean"] == 3.0
    # a logger without steps_key and no counter keys numbers its own records on "step"
    assert [e.steps for e in journal if e.namespace == "replay"] == [{"step": 0}, {"step": 1}, {"step": 2}]
    with pytest.raises(RuntimeError, match="closed"):
        factory("learner", "learner_steps", 0)


def test_acme_040_two_argument_factory_is_teed(tmp_path):
    made = {}

    def make_experiment_logger(label, steps_key="steps"):  # acme.utils.experiment_utils' signature in 0.4.0
        made[label] = (steps_key, loggers.InMemoryLogger())
        return made[label][1]

    factory = make_logger_factory(memory_config(tmp_path), acme_factory=make_experiment_logger)
    logger = factory("learner", "learner_steps", 0)
    logger.write({"critic_loss": 2.0, "learner_steps": 1})
    factory.close()
    assert made["learner"][0] == "learner_steps"
    assert made["learner"][1].data == [{"critic_loss": 2.0, "learner_steps": 1}]
    record, block = factory.logger.backends["memory"].events
    assert record.data == {"critic_loss": 2.0, "learner_steps": 1} and block.data == {"critic_loss_avg": 2.0}


@pytest.mark.parametrize(
    ("names", "record_keys", "block", "axes"),
    [
        ("native", {"episode_return", "actor_steps"}, False, ["actor_steps"]),
        ("canonical", None, True, ["env_steps"]),  # every key has a canonical twin in the block
        ("both", {"episode_return", "actor_steps"}, True, ["actor_steps", "env_steps"]),
    ],
)
def test_run_names_mode_chooses_keys_and_axes(tmp_path, names, record_keys, block, axes):
    logger = rltrack.make_logger(memory_config(tmp_path, names=names))
    ours = RLTrackLogger(logger, "environment_loop", "actor_steps")
    ours.write({"episode_return": 1.0, "actor_steps": 10})
    ours.close()
    logger.close()
    scalars = [e for e in logger.backends["memory"].events if e.kind == "scalars"]
    assert {e.filed_under for e in scalars} == {"collector"} and all(list(e.steps) == axes for e in scalars)
    assert {e.namespace for e in scalars if "reward_mean" not in e.data} <= {"environment_loop"}  # the label, as written
    records = [set(e.data) for e in scalars if "reward_mean" not in e.data]
    assert records == ([record_keys] if record_keys else [])
    blocks = [e.data for e in scalars if "reward_mean" in e.data]
    assert [(b["reward_mean"], b["episode_count"]) for b in blocks] == ([(1.0, 1)] if block else [])


def test_close_flushes_and_later_writes_are_counted_not_queued(tmp_path):
    logger = rltrack.make_logger(memory_config(tmp_path))
    ours = RLTrackLogger(logger, "eval_loop", "actor_steps")
    ours.write({"episode_return": 1.0, "actor_steps": 1})
    ours.close()
    assert len(logger.backends["memory"].events) == 4  # close sent the block (scalars, each_reward, [INFO]) and waited
    ours.write({"episode_return": 2.0, "actor_steps": 2})
    assert logger.report.total("dropped") == 1
    logger.close()
    assert {e.filed_under for e in logger.backends["memory"].events} == {"evaluator"}
    assert len(logger.backends["memory"].events) == 4
    own = RLTrackLogger(rltrack.make_logger(memory_config(tmp_path, name="own")), "learner", close_logger=True)
    own.close()
    assert json.loads((own.logger.run_dir / "meta.json").read_text())["status"] == "finished"


def test_tee_accepts_a_plain_rltrack_logger_and_rejects_others(tmp_path):
    logger = rltrack.make_logger(memory_config(tmp_path))
    both = tee(loggers.InMemoryLogger(), logger, label="actor", steps_key="actor_steps", task_instance=2)
    both.write({"episode_return": 1.0, "actor_steps": 4})
    logger.close()
    [event] = logger.backends["memory"].events
    assert (event.namespace, event.stage, event.worker, event.steps["actor_steps"]) == ("actor", "collector", "2", 4)
    with pytest.raises(TypeError, match="RLTrackLogger"):
        tee(loggers.InMemoryLogger(), loggers.InMemoryLogger())


def test_non_scalar_acme_values_are_routed_by_the_core(tmp_path):
    logger = rltrack.make_logger(memory_config(tmp_path))
    ours = RLTrackLogger(logger, "learner", "learner_steps")
    ours.write({"learner_steps": np.int64(1), "q_values": np.arange(4.0), "phase": "warmup", "loss": np.array(0.25)})
    logger.close()
    kinds = {e.kind: e.data for e in logger.backends["memory"].events}
    assert kinds["scalars"] == {"learner_steps": 1, "loss": 0.25}  # the learner block comes at close (none here)
    assert kinds["histogram"] == {"q_values": [0.0, 1.0, 2.0, 3.0]}
    assert kinds["text"] == {"phase": "warmup"}


def test_canonical_table_stays_inside_each_namespace():
    for native, canonical in CANONICAL.items():
        assert native.count("/") == 1 and canonical.count("/") == 1
        assert native.split("/")[0] == canonical.split("/")[0], native
    from rltrack.frameworks.canonical import vocabulary

    assert "collector/episode_return" in vocabulary()["collector/reward_mean"]["acme"]


def test_routing_and_blocks_are_built_on_the_pipeline_thread_from_a_copy(tmp_path):
    """The calling thread only queues: no event is emitted from it (the renames
    and learner blocks are built on the pipeline thread), and what Acme does to
    its dict after `write` does not change what was logged. The order is kept:
    a block comes after the records it averages, before the next one's record."""
    logger = rltrack.make_logger(memory_config(tmp_path))
    ours = RLTrackLogger(logger, "learner", "learner_steps", stage_every=2)

    def emit_on_calling_thread(event):
        raise AssertionError(f"emitted on the calling thread: {event}")

    logger.emit = emit_on_calling_thread
    for step in (1, 2, 3):
        data = {"loss": float(step), "learner_steps": step}
        ours.write(data)
        data["loss"] = -1.0
        data["later"] = 0.0
    ours.close()
    logger.close()
    sent = [(e.steps["learner_steps"], e.data) for e in logger.backends["memory"].events]
    assert sent == [
        (1, {"loss": 1.0, "learner_steps": 1}),
        (2, {"total_loss_avg": 1.5}),
        (2, {"loss": 2.0, "learner_steps": 2}),
        (3, {"loss": 3.0, "learner_steps": 3}),
        (3, {"total_loss_avg": 3.0}),
    ]
