"""A DI-engine run read three ways gives one set of values: the live hook on its
writer (`rltrack.adapters.tensorboard.attach`), `rltrack runs show` on its
experiment folder, and `rltrack import tensorboard` of that folder.

All three go through the one translation of TensorBoard events
(rltrack.frameworks.tensorboard), the only place that knows DI-engine's twins
`<stage>_iter/<key>` (train_iter) and `<stage>_step/<key>` (env steps): each
pair is one value `<stage>/<key>` with both axes, written once.

The folder is DI-engine 0.5.3's real serial DQN run (tests/helpers/fixtures).
The live run is that run's writer calls made again, in the file's order with
its steps, values and wall times, on tensorboardX's `SummaryWriter` (the
writer DI-engine's `ding.utils.log_helper` builds) in a folder of the same
layout, `<exp_name>/log/serial`, with the hook attached.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pandas")
tensorboardX = pytest.importorskip("tensorboardX", reason="tensorboardX's SummaryWriter, DI-engine's writer")
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: E402
from tensorboard.util.tensor_util import make_ndarray  # noqa: E402

import rltrack  # noqa: E402
import rltrack.runs as runs  # noqa: E402
from rltrack.adapters import tensorboard  # noqa: E402
from rltrack.cli.entry import main  # noqa: E402
from rltrack.importers.tensorboard import import_folder  # noqa: E402

FIXTURE = Path(__file__).parents[1] / "helpers" / "fixtures" / "dingine_dqn_cartpole"
EXPERIMENT = "cartpole_dqn_seed0"


def written_scalars() -> list[tuple[str, float, int, float]]:
    """(tag, value, step, wall time) of every scalar DI-engine wrote, in its order."""
    (events,) = (FIXTURE / "log" / "serial").glob("events.out.tfevents.*")
    return [
        (value.tag, float(make_ndarray(value.tensor).item()), proto.step, proto.wall_time)
        for proto in EventFileLoader(str(events)).Load()
        for value in proto.summary.value
    ]


def values_of(run: runs.Run) -> dict[str, list[tuple[tuple[tuple[str, int], ...], float]]]:
    """Every value of a run: name -> [(steps, value)], in the order read."""
    found: dict[str, list[tuple[tuple[tuple[str, int], ...], float]]] = {}
    for sample in run.samples:
        found.setdefault(sample.tag, []).append((tuple(sample.steps.items()), sample.value))
    return found


@pytest.fixture
def live(tmp_path: Path) -> runs.Run:
    """The run the hook makes of DI-engine's writer calls."""
    root = tmp_path / "live"
    logger = rltrack.make_logger({"run": {"root": str(root), "name": EXPERIMENT}, "backends": {"use": ["memory"]}})
    tensorboard.attach(logger)
    try:
        writer = tensorboardX.SummaryWriter(str(tmp_path / "experiments" / EXPERIMENT / "log" / "serial"))
        ding = {"__name__": "ding.utils.log_writer_helper"}  # the calls come from DI-engine's code, as in its runs
        exec("def write(writer, scalars):\n    for tag, value, step, wall_time in scalars:\n        writer.add_scalar(tag, value, step, walltime=wall_time)", ding)
        ding["write"](writer, written_scalars())
        writer.close()
    finally:
        tensorboard.detach()
        logger.close(timeout=60)
    return runs.load(str(logger.run_dir), root=root)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "root" / EXPERIMENT)
    return tmp_path / "root"


def test_the_folder_and_its_import_hold_the_live_hooks_values_once_with_both_axes(live, root, tmp_path, capsys) -> None:
    folder = runs.load(EXPERIMENT, root=root)
    (imported_dir,) = import_folder(root / EXPERIMENT, tmp_path / "imported")
    imported = runs.load(str(imported_dir), root=tmp_path / "imported")
    expected = values_of(live)
    assert values_of(folder) == expected
    assert values_of(imported) == expected

    written = written_scalars()
    # once: a pair's two points are one value, no name keeps DI-engine's axis in it
    assert not [name for name in expected if "_iter/" in name or "_step/" in name]
    assert sum(map(len, expected.values())) == sum(1 for tag, *_ in written if "_step/" not in tag)
    # both axes, env steps first, each from its own half of the pair
    by_tag: dict[str, list[tuple[int, float]]] = {}
    for tag, value, step, _ in written:
        by_tag.setdefault(tag, []).append((step, value))
    for tag, points in by_tag.items():
        stage, _, key = tag.partition("/")
        if stage.endswith("_step"):
            iterations = by_tag[f"{stage[: -len('_step')]}_iter/{key}"]
            name = f"{stage[: -len('_step')]}/{key}"
            assert expected[name] == [((("env_steps", s), ("train_iter", i)), v) for (s, v), (i, _) in zip(points, iterations, strict=True)], name

    code = main(["runs", "show", EXPERIMENT, "--root", str(root), "--json"])
    shown = json.loads(capsys.readouterr().out)["metrics"]
    assert code == 0 and {name: row["count"] for name, row in shown.items()} == {name: len(points) for name, points in expected.items()}
