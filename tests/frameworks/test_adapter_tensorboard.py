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
    cleanrl_like(before)
    before.close()
    assert accumulated(tmp_path / "attached") == accumulated(tmp_path / "plain")
    assert memory_logger.flush(timeout=30)
    memory = memory_logger.backends["memory"]
    assert memory.metrics["collector/episodic_return"] == [0.0, 10.0, 20.0]  # a one-element array is the scalar it holds
    assert memory.metrics["collector/reward_mean"] == [0.0, 10.0, 20.0]
    assert memory.steps["collector/episodic_return"] == [128, 256, 384]
    assert [e.steps for e in memory.events if e.namespace == "learner"] == [{"env_steps": s} for s in (128, 256, 384)]
    (hparams,) = [e.data for e in memory.events if e.kind == "hparams"]
    assert hparams == {"num_steps": 128, "cuda": False}
    (histogram,) = [e for e in memory.events if e.kind == "histogram"]
    assert histogram.steps == {"step": 384} and len(histogram.data["actions"]) == 20  # no prefix that says what the step counts
    assert {e.source for e in memory.events} == {"tensorboard"} and {e.run for e in memory.events} == {"tb"}


def test_classes_imported_by_name_and_both_kinds_in_one_run(tmp_path: Path, memory_logger: rltrack.Logger) -> None:
    tensorboard.attach(memory_logger)
    assert ImportedByName.add_event is not ORIGINAL_ADD_EVENT  # the class itself: a name imported earlier sees the hook
    direct = ImportedByName(str(tmp_path / "skrl_like"))  # skrl writes through the class it imported
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    direct.add_event(Event(wall_time=1.0, step=5, summary=Summary(value=[Summary.Value(tag="Reward / Total reward (mean)", simple_value=3.0)])))
    direct.close()
    dingine_like = tensorboardX.SummaryWriter(str(tmp_path / "skrl_like" / "dingine"))
    dingine_like.add_scalar("collector_iter/reward_mean", 7.0, 2)
    dingine_like.add_scalar("collector_step/reward_mean", 7.0, 64)
    dingine_like.close()
    assert memory_logger.flush(timeout=30)
    memory = memory_logger.backends["memory"]
    assert memory.metrics["collector/reward_mean"] == [3.0]  # skrl's tag, canonical name
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
    assert memory_logger.backends["memory"].metrics["collector/SPS"] == [100.0]
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
    assert [(e.steps, e.data["value_loss"]) for e in events] == [({"env_steps": s}, s / 2) for s in range(3)]


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
    assert [(e.steps, e.data["SPS"]) for e in events] == [({"env_steps": 1}, 1.0), ({"env_steps": 2}, 2.0)]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["parent"]
