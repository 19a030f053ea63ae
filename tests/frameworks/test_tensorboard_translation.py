"""TensorBoard Event protos -> rltrack events (rltrack.frameworks.tensorboard).

Read from real files: DI-engine 0.5.3's own event file (tests/helpers/fixtures)
and files written here by torch's and tensorboardX's real writers; the protos
come back through TensorBoard's `EventFileLoader`, as an importer reads them.
The DI-engine file, translated and written again by rltrack's own DI layout
(`tb_axes = ["iter", "step"]`), gives back every scalar DI-engine wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tensorboard", reason="TensorBoard's event file reader (rltrack[runs])")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: E402

from rltrack.core.events import Event  # noqa: E402
from rltrack.core.report import Report  # noqa: E402
from rltrack.frameworks.tensorboard import Translator, route, stored_name  # noqa: E402
from rltrack.frameworks.tensorboard_runs import run_name  # noqa: E402
from rltrack.frameworks.tensorboard_values import markdown_table, session_hparams, typed  # noqa: E402
from rltrack.sinks.tfevents import EventFileWriter as RltrackEventFileWriter  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "helpers" / "fixtures"
DI_RUNS = ["dingine_dqn_cartpole", "dingine_dqn_cartpole_advanced"]


def scalars_of(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(s.step, s.value) for s in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def translate(logdirs: list[Path], **options: Any) -> tuple[list[Event], Translator]:
    """Every event file under each of `logdirs` (in this order, files by name), through one translator."""
    translator = Translator(**options)
    events: list[Event] = []
    for logdir in logdirs:
        for path in sorted(logdir.glob("events.out.tfevents.*")):
            for proto in EventFileLoader(str(path)).Load():
                events += translator.add(proto, str(logdir))
    return events + translator.flush(), translator


@pytest.mark.parametrize("fixture", DI_RUNS)
def test_dingine_twins_are_one_value_with_both_axes_as_rltracks_own_layout_writes_them(fixture: str, tmp_path: Path) -> None:
    serial = FIXTURES / fixture / "log" / "serial"
    events, translator = translate([serial], run=fixture)
    original = scalars_of(serial)
    # every `_step` half is paired with its `_iter` half: one value, env steps first
    paired = [e for e in events if set(e.steps) == {"env_steps", "train_iter"}]
    assert {e.namespace for e in paired} >= {"collector", "evaluator", "learner"}
    assert all(list(e.steps) == ["env_steps", "train_iter"] for e in paired)
    assert sum(len(e.data) for e in paired) == sum(len(points) for tag, points in original.items() if "_step/" in tag) + len(
        original["collector_iter/total_envstep_count"]
    )
    # every point DI-engine wrote is one value: a pair's two points are one
    assert sum(len(e.data) for e in events) == sum(len(points) for tag, points in original.items() if "_step/" not in tag)
    collector = [e for e in paired if e.namespace == "collector"]
    assert [(e.steps["train_iter"], e.steps["env_steps"], e.data["reward_mean"]) for e in collector] == [
        (i, s, v) for (i, v), (s, _) in zip(original["collector_iter/reward_mean"], original["collector_step/reward_mean"])
    ]
    assert all("total_envstep_count" in e.data for e in collector)  # written against iterations only: joins its block
    # rltrack's own DI layout writes exactly DI-engine's tags, steps and values back
    writer = RltrackEventFileWriter(tmp_path / "again", ["iter", "step"])
    for event in events:
        writer.write(event)
    writer.close()
    assert scalars_of(tmp_path / "again") == original
    assert translator.report.as_dict()["counts"] == {}


def test_run_names_from_log_directories() -> None:
    assert run_name("runs/CartPole-v1__ppo__1__1732700000") == "CartPole-v1__ppo__1__1732700000"
    assert run_name("./cartpole_dqn_seed0/log/serial") == "cartpole_dqn_seed0"
    assert run_name("/tmp/x/logs/") == "logs"
    # rl_games' fixed folder names no run: its experiment above it does, for rl_games' writer only
    assert run_name("runs/Ant_ppo_29-04-36-26/summaries", "rl_games") == "Ant_ppo_29-04-36-26"
    assert run_name("runs/mine/summaries") == "summaries"
    # HF's default `<output_dir>/runs/<time>_<host>`: the output_dir, for transformers' writer only
    assert run_name("out/grpo-tiny/runs/Nov29_04-36-26_vm", "transformers") == "grpo-tiny"
    assert run_name("out/grpo-tiny/runs/Nov29_04-36-26_vm") == "Nov29_04-36-26_vm"


def test_a_tag_keeps_its_name_and_only_its_own_librarys_table_gives_a_twin() -> None:
    # CleanRL's script: the tag as written, filed under the collector stage, its canonical twin beside it
    cleanrl = route("charts/episodic_return", library="cleanrl")
    assert cleanrl == route("charts/episodic_return", "both", "cleanrl")
    assert cleanrl.places == (("charts", "episodic_return", "collector"), ("collector", "reward_mean", ""))
    assert cleanrl.axis == "env_steps"
    assert route("charts/episodic_return", "canonical", "cleanrl").places == (("collector", "reward_mean", ""),)
    assert route("charts/episodic_return", "native", "cleanrl").places == (("charts", "episodic_return", "collector"),)
    assert route("charts/learning_rate", library="cleanrl").places[1] == ("learner", "cur_lr_avg", "")
    assert route("charts/SPS", "canonical", "cleanrl").places == (("collector", "avg_envstep_per_sec", ""),)
    assert route("losses/old_approx_kl", "canonical", "cleanrl").places == (("losses", "old_approx_kl", "learner"),)  # no twin: kept
    # SB3's table for SB3's writer; HF's (TRL's) own table for its writer, at its global_step (updates);
    # the same tags from rl_games or an unknown writer keep their names, no twin
    assert route("train/loss", library="sb3").places == (("train", "loss", "learner"), ("learner", "total_loss_avg", ""))
    assert route("train/loss", library="transformers").places == (("train", "loss", ""), ("learner", "total_loss_avg", ""))
    assert route("train/reward", library="transformers").places == (("train", "reward", ""), ("collector", "reward_mean", ""))
    assert route("train/loss", library="transformers").axis == "train_iter"
    assert route("losses/a_loss", library="transformers").places == (("losses", "a_loss", ""),)
    for library in ("rl_games", None):
        assert route("train/loss", library=library) == route("train/loss", "canonical", library)
        assert route("train/loss", library=library).places == (("train", "loss", ""),)
        assert route("losses/a_loss", library=library).places == (("losses", "a_loss", ""),)
        assert route("charts/episodic_return", library=library).places == (("charts", "episodic_return", ""),)
        assert route("charts/episodic_return", library=library).axis == "step"
    assert route("Train/mean_reward", library="rsl_rl").axis == "train_iter"  # rsl_rl: the learning iteration
    assert route("Train/mean_reward/time", library="rsl_rl").axis == "seconds"
    assert route("Episode_Reward/alive", library="rsl_rl").axis == "train_iter"
    skrl = route("Reward / Total reward (mean)", library="skrl")
    assert skrl.places == (("Reward ", " Total reward (mean)", "collector"), ("collector", "reward_mean", "")) and skrl.axis == "env_steps"
    for info in ("Episode_Reward/alive", "Info / success_rate"):  # the environments' infos skrl's writer writes: its axis
        assert route(info, library="skrl").axis == "env_steps" and len(route(info, library="skrl").places) == 1
    assert route("evaluator_step/reward_mean", library="ding").axis == "env_steps"
    assert route("evaluator_step/reward_mean").places == (("evaluator_step", "reward_mean", ""),)  # not DI-engine's: as written
    assert route("my/own/tag").places == (("my", "own/tag", ""),) and route("my/own/tag").axis == "step"
    assert route("plain").places == (("", "plain", ""),)
    assert stored_name("losses/value_loss", library="cleanrl") == "losses/value_loss"
    assert stored_name("losses/value_loss", "canonical", "cleanrl") == "learner/value_loss_avg"
    assert stored_name("Reward / Total reward (mean)", library="skrl") == "Reward / Total reward (mean)"
    assert stored_name("collector_step/reward_mean", library="ding") == "collector/reward_mean"


def test_hyperparameter_texts_are_typed() -> None:
    table = "|param|value|\n|-|-|\n|num_steps|2048|\n|cuda|True|\n|lr|0.00025|\n|env_id|CartPole-v1|\n|wandb_entity|None|\n|sizes|[64, 64]|"
    assert markdown_table(table) == {
        "num_steps": 2048, "cuda": True, "lr": 0.00025, "env_id": "CartPole-v1", "wandb_entity": None, "sizes": [64, 64],
    }  # fmt: skip
    assert typed("1e-3") == 0.001 and typed("ppo") == "ppo" and typed("(1+2j)") == "(1+2j)"


def written(tmp_path: Path, kind: str, library: str | None) -> tuple[list[Event], Translator]:
    """A CleanRL-shaped logging sequence (it imitates CleanRL's calls: the
    hyperparameter table, `charts/` and `losses/` against `global_step`) plus
    every other kind, through a real writer of `kind`, read back from its files
    as written by `library`'s code."""
    import numpy as np

    if kind == "torch":
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(tmp_path / "run"))
    else:
        from tensorboardX import SummaryWriter  # type: ignore[no-redef]

        writer = SummaryWriter(str(tmp_path / "run"))
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n|num_steps|2048|\n|anneal_lr|True|\n|learning_rate|0.00025|")
    for step in (128, 256, 384, 128, 256):  # a restarted loop: the last two go back
        writer.add_scalar("charts/episodic_return", np.array([step / 8]), step)
        writer.add_scalar("charts/episodic_length", 20, step)
        writer.add_scalar("losses/value_loss", step / 100, step)
    writer.add_scalars("loss", {"a": 1.0, "b": 2.0}, 7)
    writer.add_histogram("actions", np.arange(100) % 4, 9)
    writer.add_text("notes", "hello", 3)
    writer.add_image("frame", np.zeros((3, 4, 5), dtype=np.uint8), 11)
    writer.add_hparams({"lr": 0.1, "batch": 64, "algo": "ppo"}, {"score": 1.0})
    writer.close()
    logdirs = sorted({p.parent for p in (tmp_path / "run").rglob("events.out.tfevents.*")}, key=lambda p: (len(p.parts), str(p)))
    saved: list[tuple[str, str, int, bytes]] = []

    def save_image(namespace: str, key: str, step: int, png: bytes) -> dict[str, Any]:
        saved.append((namespace, key, step, png))
        return {"path": f"media/{key}_{step}.png", "format": "png"}

    events, translator = translate(logdirs, run="r", report=Report(), save_image=save_image, library=lambda logdir, tag: library)
    assert [(n, k, s, png[:8]) for n, k, s, png in saved] == [("", "frame", 11, b"\x89PNG\r\n\x1a\n")]
    return events, translator


@pytest.mark.parametrize("kind", ["torch", "tensorboardX"])
def test_a_cleanrl_shaped_writer_of_either_kind(kind: str, tmp_path: Path) -> None:
    events, translator = written(tmp_path, kind, "cleanrl")
    by_kind: dict[str, list[Event]] = {}
    for event in events:
        by_kind.setdefault(event.kind, []).append(event)
    hparams = [e.data for e in by_kind["hparams"]]
    assert hparams[0] == {"num_steps": 2048, "anneal_lr": True, "learning_rate": 0.00025}
    assert hparams[1] == {"lr": 0.1, "batch": 64, "algo": "ppo"}
    assert [type(v) for v in hparams[0].values()] == [int, bool, float]
    charts = [e for e in by_kind["scalars"] if e.namespace == "charts"]  # as written, filed under the collector stage
    assert [(e.steps, e.data, e.stage) for e in charts] == [
        ({"env_steps": s}, {"episodic_return": s / 8, "episodic_length": 20.0}, "collector") for s in (128, 256, 384, 128, 256)
    ]  # a step that goes back is kept
    collector = [e for e in by_kind["scalars"] if e.namespace == "collector"]  # the canonical twins beside them
    assert [(e.steps, e.data, e.stage) for e in collector] == [
        ({"env_steps": s}, {"reward_mean": s / 8, "avg_envstep_per_episode": 20.0}, "") for s in (128, 256, 384, 128, 256)
    ]
    assert translator.report.as_dict()["counts"] == {"tensorboard.kept": {"values whose step went back (a restarted loop)": 3}}
    losses = [e for e in by_kind["scalars"] if e.namespace == "losses"]
    learner = [e for e in by_kind["scalars"] if e.namespace == "learner"]
    assert [e.data["value_loss"] for e in losses] == [e.data["value_loss_avg"] for e in learner] == pytest.approx([1.28, 2.56, 3.84, 1.28, 2.56])
    assert {e.stage for e in losses} == {"learner"}
    (scalars,) = [e for e in by_kind["scalars"] if e.namespace == "loss"]  # add_scalars: one sub-writer per key, one event
    assert (scalars.steps, scalars.data) == ({"env_steps": 7}, {"a": 1.0, "b": 2.0})
    (metric,) = [e for e in by_kind["scalars"] if e.namespace == ""]  # add_hparams' metric, under its own tag
    assert metric.data == {"score": 1.0}
    (histogram,) = by_kind["histogram"]
    assert len(histogram.data["actions"]) == 100 and min(histogram.data["actions"]) >= 0 and max(histogram.data["actions"]) <= 3
    assert sum(histogram.data["actions"]) == pytest.approx(150, rel=0.2)
    assert [(e.steps, e.data) for e in by_kind["text"]] == [({"env_steps": 3}, {"notes": "hello"})]
    assert [(e.steps, e.data) for e in by_kind["image"]] == [({"env_steps": 11}, {"frame": {"path": "media/frame_11.png", "format": "png"}})]
    assert all(e.run == "r" and e.source == "tensorboard" for e in events)


@pytest.mark.parametrize(("library", "axis"), [("rl_games", "step"), ("transformers", "train_iter"), (None, "step")])
def test_the_same_tags_from_another_writer_keep_their_names_and_get_no_twin(library: str | None, axis: str, tmp_path: Path) -> None:
    """CleanRL's tags from another library's writer: no twin, at that writer's axis (HF's global_step counts updates)."""
    events, _ = written(tmp_path, "tensorboardX", library)
    scalars = [e for e in events if e.kind == "scalars"]
    assert {e.namespace for e in scalars} == {"charts", "losses", "loss", ""}
    assert {(e.stage, *e.steps) for e in scalars} == {("", axis)}
    assert [e.data for e in scalars if e.namespace == "charts"] == [{"episodic_return": s / 8, "episodic_length": 20.0} for s in (128, 256, 384, 128, 256)]
    assert [e.data for e in events if e.kind == "hparams"][0] == {"num_steps": 2048, "anneal_lr": True, "learning_rate": 0.00025}


def test_a_second_log_directory_is_a_namespace_and_new_style_scalars_count(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    main, evaluation = SummaryWriter(str(tmp_path / "run")), SummaryWriter(str(tmp_path / "run" / "eval"))
    main.add_scalar("charts/SPS", 100.0, 10, new_style=True)
    evaluation.add_scalar("charts/episodic_return", 5.0, 10)
    main.close()
    evaluation.close()
    events, _ = translate([tmp_path / "run", tmp_path / "run" / "eval"], library=lambda logdir, tag: "cleanrl")
    assert [(e.namespace, e.steps, e.data) for e in events] == [
        ("charts", {"env_steps": 10}, {"SPS": 100.0}),
        ("collector", {"env_steps": 10}, {"avg_envstep_per_sec": 100.0}),
        ("eval", {"env_steps": 10}, {"charts/episodic_return": 5.0}),
    ]


def test_session_hparams_decode_the_plugins_protobuf() -> None:
    from torch.utils.tensorboard.summary import hparams

    _, start, _ = hparams({"lr": 0.5, "steps": 2048, "name": "x"}, {})
    content = start.value[0].metadata.plugin_data.content
    assert session_hparams(content) == {"lr": 0.5, "steps": 2048, "name": "x"}
