"""`rltrack.adapters.tensorboard.attach`: every TensorBoard writer of a process into a run.

Real writers of both kinds (torch's `SummaryWriter` over TensorBoard's
`EventFileWriter`, tensorboardX's) write real event files; the run is read
back from rltrack's memory backend and journal, the event files with
TensorBoard's `EventAccumulator`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("torch.utils.tensorboard", reason="torch's SummaryWriter (the writer CleanRL, skrl and rsl_rl use)")
tensorboardX = pytest.importorskip("tensorboardX", reason="tensorboardX's SummaryWriter (DI-engine's, rl_games')")
import numpy as np  # noqa: E402
from reliability_helpers import PYTHON, child_env  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.summary.writer.event_file_writer import EventFileWriter as ImportedByName  # noqa: E402 - as skrl does, before attach
from torch.utils.tensorboard import SummaryWriter  # noqa: E402

import rltrack  # noqa: E402
from rltrack.adapters import tensorboard  # noqa: E402

ORIGINAL_ADD_EVENT = ImportedByName.add_event


@pytest.fixture
def memory_logger(tmp_path: Path) -> Iterator[rltrack.Logger]:
    logger = rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": "tb"}, "backends": {"use": ["memory"]}})
    yield logger
    tensorboard.detach()
    logger.close(timeout=10)


def writer_of(kind: str, logdir: Path) -> Any:
    return SummaryWriter(str(logdir)) if kind == "torch" else tensorboardX.SummaryWriter(str(logdir))


def cleanrl_like(writer: Any) -> None:
    """Imitates CleanRL's logging calls (the hyperparameter table, one-element
    arrays for returns, `charts/` and `losses/` at `global_step`), with fixed
    wall times so that two runs' files can be compared."""
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n|num_steps|128|\n|cuda|False|", walltime=1.0)
    for i, step in enumerate((128, 256, 384)):
        writer.add_scalar("charts/episodic_return", np.array([10.0 * i]), step, walltime=2.0 + i)
        writer.add_scalar("losses/value_loss", 0.5 / (i + 1), step, walltime=2.5 + i)
    writer.add_histogram("actions", np.arange(20) % 2, 384, walltime=9.0)


def as_module(name: str, function: Any, file: str | None = None, **names: Any) -> Any:
    """`function` defined again in a module named `name` (at `file`): its calls
    to a writer come from that module, as a library's own code's would."""
    import inspect
    import textwrap

    namespace: dict[str, Any] = {"__name__": name, "__file__": file, "np": np, "Any": Any, **names}
    exec(compile(textwrap.dedent(inspect.getsource(function)), file or f"<{name}>", "exec"), namespace)
    return namespace[function.__name__]


def accumulated(logdir: Path) -> dict[str, Any]:
    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0, "histograms": 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    return {
        "scalars": {t: [(s.wall_time, s.step, s.value) for s in accumulator.Scalars(t)] for t in tags["scalars"]},
        "tensors": {t: [(s.wall_time, s.step, s.tensor_proto.SerializeToString()) for s in accumulator.Tensors(t)] for t in tags["tensors"]},
        "histograms": {t: [(h.wall_time, h.step, h.histogram_value) for h in accumulator.Histograms(t)] for t in tags["histograms"]},
    }


@pytest.mark.parametrize("kind", ["torch", "tensorboardX"])
def test_values_reach_the_run_and_the_event_files_stay_as_they_were(kind: str, tmp_path: Path, memory_logger: rltrack.Logger) -> None:
    plain = writer_of(kind, tmp_path / "plain")
    cleanrl_like(plain)
    plain.close()
    before = writer_of(kind, tmp_path / "attached")  # made before attach
    tensorboard.attach(memory_logger)
    as_module("__main__", cleanrl_like, "/home/u/cleanrl/cleanrl/ppo.py")(before)  # CleanRL's script, as cloned
    before.close()
    assert accumulated(tmp_path / "attached") == accumulated(tmp_path / "plain")
    assert memory_logger.flush(timeout=30)
    memory = memory_logger.backends["memory"]
    assert memory.metrics["charts/episodic_return"] == [0.0, 10.0, 20.0]  # as written; a one-element array is the scalar it holds
    assert memory.metrics["collector/reward_mean"] == [0.0, 10.0, 20.0]  # its canonical twin beside it
    assert memory.steps["charts/episodic_return"] == memory.steps["collector/reward_mean"] == [128, 256, 384]
    assert memory.metrics["losses/value_loss"] == memory.metrics["learner/value_loss_avg"] == pytest.approx([0.5, 0.25, 0.5 / 3])
    assert [(e.steps, e.stage) for e in memory.events if e.namespace == "losses"] == [({"env_steps": s}, "learner") for s in (128, 256, 384)]
    (hparams,) = [e.data for e in memory.events if e.kind == "hparams"]
    assert hparams == {"num_steps": 128, "cuda": False}
    (histogram,) = [e for e in memory.events if e.kind == "histogram"]
    assert histogram.steps == {"env_steps": 384} and len(histogram.data["actions"]) == 20  # every tag of CleanRL's writer: global_step
    assert {e.source for e in memory.events} == {"tensorboard"} and {e.run for e in memory.events} == {"tb"}


def test_classes_imported_by_name_and_both_kinds_in_one_run(tmp_path: Path, memory_logger: rltrack.Logger) -> None:
    tensorboard.attach(memory_logger)
    assert ImportedByName.add_event is not ORIGINAL_ADD_EVENT  # the class itself: a name imported earlier sees the hook
    direct = ImportedByName(str(tmp_path / "skrl_like"))  # skrl writes through the class it imported
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    def skrl_writes(direct: Any, tag: str, value: float, step: int) -> None:
        direct.add_event(Event(wall_time=1.0, step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)])))

    as_module("skrl.agents.torch.base", skrl_writes, Event=Event, Summary=Summary)(direct, "Reward / Total reward (mean)", 3.0, 5)
    direct.close()
    dingine_like = tensorboardX.SummaryWriter(str(tmp_path / "skrl_like" / "dingine"))
    dingine_like.add_scalar("collector_iter/reward_mean", 7.0, 2)
    dingine_like.add_scalar("collector_step/reward_mean", 7.0, 64)
    dingine_like.close()
    assert memory_logger.flush(timeout=30)
    memory = memory_logger.backends["memory"]
    assert memory.metrics["Reward / Total reward (mean)"] == memory.metrics["collector/reward_mean"] == [3.0]  # skrl's tag, its twin
    assert memory.metrics["dingine/collector_iter/reward_mean"] == [7.0]  # another log directory: a namespace, tags kept
    assert memory.steps["collector/reward_mean"] == [5]


def test_attach_twice_then_detach_restores_the_classes(tmp_path: Path, memory_logger: rltrack.Logger) -> None:
    other = rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": "other"}, "backends": {"use": ["memory"]}})
    tensorboard.attach(other)
    tensorboard.attach(memory_logger)  # the second target replaces the first; the class is patched once
    tensorboard.attach(memory_logger)  # the same again: nothing changes
    assert ImportedByName.add_event.__wrapped__ is ORIGINAL_ADD_EVENT
    writer = SummaryWriter(str(tmp_path / "w"))
    writer.add_scalar("charts/SPS", 100.0, 1)
    writer.close()
    tensorboard.detach()
    assert ImportedByName.add_event is ORIGINAL_ADD_EVENT
    writer = SummaryWriter(str(tmp_path / "after"))
    writer.add_scalar("charts/SPS", 200.0, 2)  # not sent: detached
    writer.close()
    assert memory_logger.flush(timeout=30) and other.close(timeout=10)
    assert memory_logger.backends["memory"].metrics == {"charts/SPS": [100.0]}  # a test's writer: no library, as written
    assert other.backends["memory"].metrics == {}


def test_values_held_back_reach_the_run_when_the_process_ends(tmp_path: Path) -> None:
    """The last block of a writer never closed is handed over before the
    logger closes at exit; a writer module imported after `attach` is hooked
    as it is imported."""
    script = (
        "import sys, rltrack\n"
        "from rltrack.adapters import tensorboard\n"
        f"logger = rltrack.make_logger({{'run': {{'root': {str(tmp_path / 'runs')!r}, 'name': 'ends'}}, 'backends': {{'use': ['local']}}}})\n"
        "tensorboard.attach(logger)\n"
        "assert 'torch.utils.tensorboard' not in sys.modules and 'tensorboardX' not in sys.modules\n"
        "from torch.utils.tensorboard import SummaryWriter\n"
        f"w = SummaryWriter({str(tmp_path / 'tb')!r})\n"
        "for step in range(3):\n"
        "    w.add_scalar('losses/value_loss', step / 2, step)\n"
        "w.flush()\n"  # not closed
    )
    done = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, env=child_env(tmp_path), timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (journal,) = (tmp_path / "runs" / "ends").glob("journal*.jsonl")
    events = [e for e in rltrack.read_journal(journal.parent) if e.kind == "scalars"]
    assert [(e.namespace, e.steps, e.data["value_loss"]) for e in events] == [("losses", {"step": s}, s / 2) for s in range(3)]


def test_the_plain_api_takes_a_one_element_array_as_a_scalar(tmp_path: Path) -> None:
    import torch

    logger = rltrack.make_logger({"run": {"root": str(tmp_path / "runs")}, "backends": {"use": ["memory"]}})
    logger.write({"episodic_return": np.array([12.5]), "loss": torch.tensor([[0.25]]), "q": np.array([1.0, 2.0])}, step=3)
    assert logger.close(timeout=10)
    memory = logger.backends["memory"]
    assert memory.metrics == {"episodic_return": [12.5], "loss": [0.25]}
    assert [e.data for e in memory.events if e.kind == "histogram"] == [{"q": [1.0, 2.0]}]


def test_namespaced_puts_every_log_directory_in_a_namespace_of_its_name(tmp_path: Path, memory_logger: rltrack.Logger) -> None:
    """What a process writing one run beside others does (`run.launch_runs = "one"`): its tags
    keep their names, in a namespace named after each writer's log directory."""
    tensorboard.attach(memory_logger, namespaced=True)
    worker = SummaryWriter(str(tmp_path / "runs" / "worker_1"))
    worker.add_scalar("charts/SPS", 50.0, 128)
    worker.add_scalars("losses", {"value": 0.5, "policy": 0.25}, 128)
    worker.close()
    assert memory_logger.flush(timeout=30)
    memory = memory_logger.backends["memory"]
    assert memory.metrics["worker_1/charts/SPS"] == [50.0] and memory.steps["worker_1/charts/SPS"] == [128]
    assert memory.metrics["worker_1/losses/value"] == [0.5] and memory.metrics["worker_1/losses/policy"] == [0.25]
    assert not any(name.startswith("collector/") for name in memory.metrics)


def test_a_child_forked_from_an_attach_logger_process_says_its_values_are_not_sent(tmp_path: Path) -> None:
    """The fixed logger's run and thread are the parent's: the forked child's values stay in its
    event files, and it says so once, while the parent's values all reach the run."""
    script = (
        "import os, rltrack\n"
        "from rltrack.adapters import tensorboard\n"
        "from torch.utils.tensorboard import SummaryWriter\n"
        f"logger = rltrack.make_logger({{'run': {{'root': {str(tmp_path / 'runs')!r}, 'name': 'parent'}}, 'backends': {{'use': ['local']}}}})\n"
        "tensorboard.attach(logger)\n"
        "w = SummaryWriter('tb/parent')\n"
        "w.add_scalar('charts/SPS', 1.0, 1)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    child = SummaryWriter('tb/child')\n"
        "    child.add_scalar('charts/SPS', 9.0, 1)\n"
        "    child.add_scalar('charts/SPS', 9.0, 2)\n"
        "    child.close()\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "w.add_scalar('charts/SPS', 2.0, 2)\n"
        "w.close()\n"
    )
    done = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, env=child_env(tmp_path), timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("was forked from one attached with attach(logger)") == 1 and "tb/child" in done.stderr
    events = [e for e in rltrack.read_journal(tmp_path / "runs" / "parent") if e.kind == "scalars"]
    assert [(e.steps, e.data["SPS"]) for e in events] == [({"step": 1}, 1.0), ({"step": 2}, 2.0)]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["parent"]


def hf_like(writer: Any) -> None:
    """Imitates transformers' TensorBoardCallback (TRL's trainers log through it): the
    TrainingArguments as one JSON text first, then `train/` tags at `global_step`."""
    import json

    args = {"output_dir": "out/grpo-tiny", "run_name": None, "learning_rate": 5e-5, "per_device_train_batch_size": 2,
            "bf16": False, "report_to": ["tensorboard"], "lr_scheduler_kwargs": {}}  # fmt: skip
    writer.add_text("args", json.dumps(args, indent=2))
    for step in (1, 2):
        writer.add_scalar("train/loss", 0.5 / step, step)
        writer.add_scalar("train/learning_rate", 5e-5, step)
        writer.add_scalar("train/reward", float(step), step)


def rl_games_like(writer: Any) -> None:
    """Imitates rl_games' a2c_common: `losses/`, `rewards/` at its frame count."""
    for frame in (256, 512):
        writer.add_scalar("losses/a_loss", frame / 1000, frame)
        writer.add_scalar("rewards/step", frame / 100, frame)


def skrl_like(writer: Any) -> None:
    """Imitates skrl's writer: its own `<Group> / <key>` tags and the environments' infos, at its timestep."""
    for timestep in (64, 128):
        writer.add_scalar("Reward / Total reward (mean)", timestep / 10, timestep)
        writer.add_scalar("Episode_Reward/alive", 1.0, timestep)
        writer.add_scalar("Info / success_rate", 0.5, timestep)


def sb3_like(writer: Any) -> None:
    """Imitates SB3's TensorBoard output format: `train/`, `rollout/` at `num_timesteps`."""
    writer.add_scalar("train/loss", 0.25, 2048)
    writer.add_scalar("rollout/ep_rew_mean", 21.0, 2048)


LIBRARY_CASES = {
    # caller module, its function, its log directory below tmp_path -> (names expected, names that must be absent, the run's name)
    "trl": ("trl.trainer.grpo_trainer", hf_like, "out/grpo-tiny/runs/Nov29_04-36-26_vm",
            {"train/loss", "train/learning_rate", "train/reward", "learner/total_loss_avg", "learner/cur_lr_avg"}, {"learner/loss"}, "grpo-tiny"),
    "transformers": ("transformers.integrations.integration_utils", hf_like, "out/grpo-tiny/runs/Nov29_04-36-26_vm",
                     {"train/loss", "train/reward", "learner/total_loss_avg", "collector/reward_mean"}, {"learner/loss"}, "grpo-tiny"),
    # a library of another package, registered by entry point (tests/plugin): its table applies to its writer only
    "plugin": ("example_rl.train", rl_games_like, "runs/plugged", {"losses/a_loss", "learner/policy_loss_avg"}, {"learner/a_loss"}, "plugged"),
    "rl_games": ("rl_games.common.a2c_common", rl_games_like, "runs/Ant_ppo_29-04-36/summaries",
                 {"losses/a_loss", "rewards/step"}, {"learner/a_loss", "learner/policy_loss_avg"}, "Ant_ppo_29-04-36"),
    "skrl": ("skrl.agents.torch.base", skrl_like, "skrl_runs/cartpole_ppo",
             {"Reward / Total reward (mean)", "collector/reward_mean", "Episode_Reward/alive", "Info / success_rate"}, set(), "cartpole_ppo"),
    "sb3": ("stable_baselines3.common.logger", sb3_like, "sb3/PPO_1",
            {"train/loss", "learner/total_loss_avg", "rollout/ep_rew_mean", "collector/reward_mean"}, {"learner/loss"}, "PPO_1"),
    "unknown": ("my_project.train", rl_games_like, "runs/mine", {"losses/a_loss"}, {"learner/a_loss"}, "mine"),
}  # fmt: skip


@pytest.mark.parametrize("kind", ["torch", "tensorboardX"])
@pytest.mark.parametrize("case", LIBRARY_CASES, ids=str)
def test_only_the_writing_librarys_table_applies_and_its_name_names_the_run(case: str, kind: str, tmp_path: Path) -> None:
    """The library is the module calling the writer: TRL's `train/loss` is not SB3's, rl_games'
    `losses/a_loss` not CleanRL's; a tag of an unknown writer keeps its name with no twin."""
    module, function, logdir, present, absent, name = LIBRARY_CASES[case]
    if case == "skrl" and kind == "tensorboardX":
        pytest.skip("skrl writes through TensorBoard's writer; tensorboardX would rewrite its tags' spaces and parentheses")
    opened: list[rltrack.Logger] = []

    def open_logger(logdir: str, *, run_name: str) -> rltrack.Logger:
        opened.append(rltrack.make_logger({"run": {"root": str(tmp_path / "rl"), "name": run_name}, "backends": {"use": ["memory"]}}))
        return opened[0]

    tensorboard.attach(open_logger)
    try:
        writer = writer_of(kind, tmp_path / logdir)
        as_module(module, function)(writer)
        writer.close()
    finally:
        tensorboard.detach()
    (logger,) = opened
    assert logger.close(timeout=30)
    memory = logger.backends["memory"]
    assert present <= set(memory.metrics) and not absent & set(memory.metrics), sorted(memory.metrics)
    assert logger.name == name
    axes = {axis for e in memory.events if e.kind == "scalars" for axis in e.steps}
    expected_axes = {"skrl": "env_steps", "sb3": "env_steps", "plugin": "env_steps", "trl": "train_iter", "transformers": "train_iter"}
    assert axes == {expected_axes.get(case, "step")}  # skrl's infos on its writer's axis too; HF's global_step counts updates
    if module.startswith(("trl", "transformers")):  # the TrainingArguments JSON: typed hyperparameters, not one text
        (hparams,) = [e.data for e in memory.events if e.kind == "hparams"]
        assert hparams["learning_rate"] == 5e-5 and hparams["per_device_train_batch_size"] == 2 and hparams["bf16"] is False
        assert hparams["output_dir"] == "out/grpo-tiny" and not [e for e in memory.events if e.kind == "text"]


RL_GAMES_WRITER = """
\"\"\"rl_games' writer as a2c_common makes it: tensorboardX's SummaryWriter in `<experiment>/summaries`
behind its interval-throttled IntervalSummaryWriter, never closed (tensorboardX closes it at exit).\"\"\"
from tensorboardX import SummaryWriter
from rl_games.common.interval_summary_writer import IntervalSummaryWriter
writer = IntervalSummaryWriter(SummaryWriter("train/Ant_ppo_29-04-36-26/summaries"), {"defer_summaries_sec": 0, "summaries_interval_sec_min": 0})
writer.last_interval = writer.interval_sec_max = 0  # every value written: no interval
for frame in range(1, 6):
    writer.add_scalar("losses/a_loss", frame / 10, frame * 256)
    writer.add_scalar("rewards/step", float(frame), frame * 256)
"""


def test_rl_games_writer_under_rltrack_run_ends_silently_named_by_its_experiment(tmp_path: Path) -> None:
    """Its writer closed by tensorboardX at exit, after rltrack closed the run, is no value given
    after close: no warning. The run is named after the experiment (not `summaries`), rl_games'
    tags as written, at the writer's step, no canonical twin (CleanRL's table is not rl_games')."""
    pytest.importorskip("rl_games", reason="rl_games 1.6.5's IntervalSummaryWriter (requirements/test.txt, installed --no-deps)")
    (tmp_path / "rltrack.toml").write_text(f'[run]\nroot = "{tmp_path / "rl"}"\n[backends]\nuse = ["local"]\n')
    command = [PYTHON, "-m", "rltrack.cli", "run", "--config", str(tmp_path / "rltrack.toml"), "--", PYTHON, "-c", RL_GAMES_WRITER]
    done = subprocess.run(command, capture_output=True, text=True, env=child_env(tmp_path), timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and "Warning" not in done.stderr and done.stderr == "", done.stderr
    (run_dir,) = (tmp_path / "rl").iterdir()
    assert run_dir.name == "Ant_ppo_29-04-36-26"
    values = [(e.tag(k), e.steps, v) for e in rltrack.read_journal(run_dir) if e.kind == "scalars" for k, v in e.data.items()]
    assert sorted(values, key=str) == sorted(
        [("losses/a_loss", {"step": f * 256}, pytest.approx(f / 10)) for f in range(1, 6)] + [("rewards/step", {"step": f * 256}, float(f)) for f in range(1, 6)], key=str
    )
