"""The Stable-Baselines3 adapter against real SB3: the writer under a hand-built
SB3 `Logger` (namespaces, step axes, typed values, key_excluded, canonical
names), `attach` and `RLTrackCallback` on real models, and real PPO runs on
CartPole-v1 compared with SB3's own progress.csv, read back from rltrack's
journal, progress.csv and TensorBoard files."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from PIL import Image as PILImage  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import EvalCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.logger import Figure, HParam, Image, Logger, Video, configure  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

import rltrack  # noqa: E402
from rltrack.adapters import sb3 as adapter  # noqa: E402
from rltrack.adapters.sb3 import CANONICAL, RLTrackCallback, RLTrackWriter, attach, model_hparams  # noqa: E402

TIMESTEPS = 4096
N_ENVS = 4  # 4 envs step together: a quarter of the policy calls for the same timesteps
ROLLOUT = 256  # timesteps per PPO iteration, hence per SB3 dump
EVAL_FREQ = 1024  # timesteps
PPO_KWARGS = dict(n_steps=ROLLOUT // N_ENVS, batch_size=256, n_epochs=2, seed=0, device="cpu", policy_kwargs=dict(net_arch=[32, 32]))


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLTRACK_CONFIG", raising=False)
    monkeypatch.delenv("RLTRACK_BACKENDS", raising=False)


def cartpole():
    return make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0)


def make_logger(root: Path, name: str = "t", names: str = "both", use=("memory",), **run):
    return rltrack.make_logger(run={"root": str(root), "name": name, "names": names, **run}, backends={"use": list(use)})


def sb3_events(logger):
    return [e for e in logger.backends["memory"].events if e.source == "sb3"]


def by_namespace(events, kind="scalars"):
    out = {}
    for event in events:
        if event.kind == kind:
            out.setdefault(event.namespace, []).append(event)
    return out


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


# ---- the writer under a hand-built SB3 logger --------------------------------


def ppo_like_dump(sb3_logger: Logger, iteration: int) -> None:
    """The keys PPO records for one dump, with SB3's own exclusions."""
    sb3_logger.record("rollout/ep_rew_mean", np.float64(20.0 + iteration))
    sb3_logger.record("rollout/ep_len_mean", np.float64(20.0 + iteration))
    sb3_logger.record("time/fps", 900)
    sb3_logger.record("time/iterations", iteration, exclude="tensorboard")
    sb3_logger.record("time/time_elapsed", 3, exclude="tensorboard")
    sb3_logger.record("time/total_timesteps", iteration * ROLLOUT, exclude="tensorboard")
    sb3_logger.record("train/loss", 0.5 / iteration)
    sb3_logger.record("train/approx_kl", np.float32(0.01))
    sb3_logger.record("train/n_updates", iteration * 10, exclude="tensorboard")
    sb3_logger.record("custom/note", "hello")
    sb3_logger.dump(step=iteration * ROLLOUT)


def test_namespaces_kinds_and_step_axes(tmp_path):
    logger = make_logger(tmp_path)
    sb3_logger = Logger(None, [RLTrackWriter(logger)])
    ppo_like_dump(sb3_logger, 1)
    ppo_like_dump(sb3_logger, 2)
    logger.close()
    events = sb3_events(logger)
    # one event per (namespace, kind) per dump; all of a dump share its wall time
    assert len({e.time for e in events}) == 2
    dump_keys = [(e.namespace, e.kind) for e in events if e.time == events[0].time]
    assert sorted(dump_keys) == sorted(set(dump_keys))
    scalars = by_namespace(events)
    assert set(scalars) == {"rollout", "collector", "time", "train", "learner"}  # SB3's keys as written, their canonical twins
    assert scalars["rollout"][1].data == {"ep_rew_mean": 22.0, "ep_len_mean": 22.0}
    assert scalars["collector"][1].data["reward_mean"] == 22.0
    assert scalars["collector"][1].data["total_envstep_count"] == 512  # canonical twin of time/total_timesteps
    assert set(scalars["time"][0].data) == {"fps", "iterations", "time_elapsed", "total_timesteps"}  # a running clock, not a duration
    assert scalars["train"][0].data["approx_kl"] == pytest.approx(0.01)
    assert scalars["learner"][0].data == {"total_loss_avg": 0.5, "approx_kl_avg": pytest.approx(0.01)}
    # the local layout files SB3's keys under their stages
    assert {(e.namespace, e.stage) for e in events if e.kind == "scalars"} == {
        ("rollout", "collector"), ("collector", ""), ("time", ""), ("train", "learner"), ("learner", "")
    }  # fmt: skip
    timing = by_namespace(events, "timing")
    assert "time" not in timing
    assert by_namespace(events, "text")["custom"][0].data == {"note": "hello"}
    for event in events:
        assert event.source == "sb3" and event.run == logger.name
        # env_steps is SB3's step; train_iter prefers time/iterations over train/n_updates
        iteration = 1 if event.time == events[0].time else 2
        assert event.steps == {"env_steps": iteration * ROLLOUT, "train_iter": iteration}
        assert event.preaggregated == (event.namespace in ("rollout", "collector"))


def test_train_iter_from_n_updates_and_carried_forward(tmp_path):
    logger = make_logger(tmp_path)
    sb3_logger = Logger(None, [RLTrackWriter(logger)])
    sb3_logger.dump(step=10)  # nothing recorded: nothing sent
    sb3_logger.record("rollout/ep_rew_mean", 1.0)
    sb3_logger.dump(step=100)
    sb3_logger.record("train/n_updates", 7, exclude="tensorboard")  # off-policy algorithms
    sb3_logger.record("train/actor_loss", 0.25)
    sb3_logger.dump(step=200)
    sb3_logger.record("eval/mean_reward", 5.0)  # an EvalCallback dump: no train keys
    sb3_logger.dump(step=300)
    logger.close()
    steps = [(e.namespace, e.steps) for e in sb3_events(logger)]
    assert steps == [
        ("rollout", {"env_steps": 100}),
        ("collector", {"env_steps": 100}),
        ("train", {"env_steps": 200, "train_iter": 7}),
        ("learner", {"env_steps": 200, "train_iter": 7}),
        ("eval", {"env_steps": 300, "train_iter": 7}),
        ("evaluator", {"env_steps": 300, "train_iter": 7}),
    ]
    assert by_namespace(sb3_events(logger))["train"][0].data == {"n_updates": 7, "actor_loss": 0.25}
    assert by_namespace(sb3_events(logger))["learner"][0].data == {"policy_loss_avg": 0.25}


def test_key_excluded(tmp_path):
    logger = make_logger(tmp_path)
    csv_format = configure(str(tmp_path / "sb3"), ["csv"]).output_formats[0]
    sb3_logger = Logger(str(tmp_path / "sb3"), [csv_format, RLTrackWriter(logger)])
    everything = ("stdout", "log", "json", "csv", "tensorboard")
    sb3_logger.record("train/sent", 1.0)
    sb3_logger.record("train/not_for_tensorboard", 2.0, exclude="tensorboard")
    sb3_logger.record("train/not_for_csv", 3.0, exclude=("csv", "stdout"))
    sb3_logger.record("train/not_for_rltrack", 4.0, exclude="rltrack")
    sb3_logger.record("train/not_for_rltrack_nor_csv", 5.0, exclude=("csv", "rltrack"))
    sb3_logger.record("train/excluded_everywhere", 6.0, exclude=everything)
    sb3_logger.dump(1)
    sb3_logger.close()
    logger.close()
    [event] = sb3_events(logger)
    assert event.data == {"sent": 1.0, "not_for_tensorboard": 2.0, "not_for_csv": 3.0}
    columns, rows = read_csv(tmp_path / "sb3" / "progress.csv")  # SB3's own format unaffected
    assert set(columns) == {"train/sent", "train/not_for_tensorboard", "train/not_for_rltrack"}
    assert rows[0]["train/not_for_rltrack"] == "4.0"
    assert adapter.FORMAT_NAME == "rltrack"


@pytest.mark.parametrize(
    ("names", "stored"),
    [
        ("both", {"rollout/ep_rew_mean", "collector/reward_mean", "time/total_timesteps", "collector/total_envstep_count", "train/loss",
                  "learner/total_loss_avg", "train/learning_rate", "learner/cur_lr_avg", "train/std"}),
        ("canonical", {"collector/reward_mean", "collector/total_envstep_count", "learner/total_loss_avg", "learner/cur_lr_avg", "train/std"}),
        ("native", {"rollout/ep_rew_mean", "time/total_timesteps", "train/loss", "train/learning_rate", "train/std"}),
    ],
)  # fmt: skip
def test_canonical_name_modes(tmp_path, names, stored):
    logger = make_logger(tmp_path, names=names)
    sb3_logger = Logger(None, [RLTrackWriter(logger)])
    for key, value in [("rollout/ep_rew_mean", 9.5), ("time/total_timesteps", 64), ("train/loss", 0.1), ("train/learning_rate", 3e-4), ("train/std", 1.0)]:
        sb3_logger.record(key, value)
    sb3_logger.dump(64)
    logger.close()
    assert {e.tag(key) for e in sb3_events(logger) for key in e.data} == stored  # train/std has no twin: kept in every mode
    if names != "native":
        assert by_namespace(sb3_events(logger))["collector"][0].data["reward_mean"] == 9.5
    # an explicit override beats the config
    assert RLTrackWriter(logger, names="native").mode == "native"


def test_canonical_table_is_well_formed():
    for native, canonical in CANONICAL.items():
        assert native.split("/")[0] in adapter.NAMESPACES, native
        assert canonical.split("/")[0] in ("collector", "evaluator", "learner"), canonical
    assert CANONICAL["rollout/ep_rew_mean"] == "collector/reward_mean"
    assert CANONICAL["eval/mean_reward"] == "evaluator/reward_mean"
    assert CANONICAL["time/total_timesteps"] == "collector/total_envstep_count"
    assert CANONICAL["train/policy_gradient_loss"] == "learner/policy_loss_avg"


def test_arrays_are_copied_at_dump(tmp_path):
    logger = make_logger(tmp_path)
    sb3_logger = Logger(None, [RLTrackWriter(logger)])
    values = np.arange(4.0)
    sb3_logger.record("train/weights", values)
    sb3_logger.dump(1)
    values[:] = -1  # the training loop reuses its buffer
    logger.close()
    [event] = sb3_events(logger)
    assert event.kind == "histogram" and event.data == {"weights": [0.0, 1.0, 2.0, 3.0]}


def test_routing_happens_on_the_pipeline_thread(tmp_path):
    """The writer only copies SB3's dicts (which SB3 clears right after) and
    queues them: no event is emitted on the training thread."""
    logger = make_logger(tmp_path)

    def emit_on_calling_thread(event):
        raise AssertionError(f"emitted on the calling thread: {event}")

    logger.emit = emit_on_calling_thread
    sb3_logger = Logger(None, [RLTrackWriter(logger)])
    ppo_like_dump(sb3_logger, 1)
    logger.close()
    assert {(e.namespace, e.kind) for e in sb3_events(logger)} == {
        ("rollout", "scalars"), ("collector", "scalars"), ("time", "scalars"), ("train", "scalars"), ("learner", "scalars"), ("custom", "text")
    }


def test_typed_values_become_media_and_hparams(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logger = make_logger(tmp_path, use=("local", "memory"), tracked=["lr"])
    csv_format = configure(str(tmp_path / "sb3"), ["csv"]).output_formats[0]
    sb3_logger = Logger(str(tmp_path / "sb3"), [csv_format, RLTrackWriter(logger)])
    hwc = np.zeros((8, 10, 3), dtype=np.uint8)
    hwc[:, :, 0] = 255
    no_csv = ("csv",)  # SB3's csv format raises on these types, so users exclude it, as SB3's docs say
    sb3_logger.record("eval/frame", Image(hwc, "HWC"), exclude=no_csv)
    sb3_logger.record("train/chw", Image(torch.full((1, 6, 5), 0.5), "CHW"), exclude=no_csv)
    sb3_logger.record("train/batch", Image(np.ones((2, 4, 3, 1)), "NHWC"), exclude=no_csv)
    sb3_logger.record("trajectory/video", Video(torch.rand(1, 5, 3, 6, 7), fps=10), exclude=no_csv)
    figure = plt.figure(figsize=(2, 1.5), dpi=50)
    plt.plot([0, 1], [1, 0])
    sb3_logger.record("trajectory/figure", Figure(figure, close=True), exclude=no_csv)
    sb3_logger.record("hparams", HParam({"lr": 3e-4, "algo": "PPO", "gae": True}, {"rollout/ep_rew_mean": 0}), exclude=no_csv)
    sb3_logger.record("train/loss", 0.5)
    sb3_logger.dump(step=512)
    sb3_logger.close()
    logger.close()
    assert not plt.fignum_exists(figure.number)  # Figure(close=True) honoured

    media = {(e.namespace, e.kind): e for e in sb3_events(logger) if e.kind in ("image", "video")}
    assert set(media) == {("eval", "image"), ("train", "image"), ("trajectory", "video"), ("trajectory", "image")}
    journal = {(e.namespace, e.kind): e for e in rltrack.read_journal(logger.run_dir) if e.kind in ("image", "video")}
    assert journal.keys() == media.keys()  # JSON in the journal, as sent

    def png(record):
        assert not Path(record["path"]).is_absolute() and record["path"].startswith("media/")
        return PILImage.open(logger.run_dir / record["path"])

    frame = journal[("eval", "image")].data["frame"]
    assert (frame["width"], frame["height"], frame["channels"], frame["format"]) == (10, 8, 3, "png")
    assert png(frame).convert("RGB").getpixel((0, 0)) == (255, 0, 0)
    chw = journal[("train", "image")].data["chw"]
    assert (chw["width"], chw["height"], chw["channels"]) == (5, 6, 1)
    assert png(chw).getpixel((0, 0)) in (127, 128)  # floats are [0, 1], as TensorBoard takes them
    batch = journal[("train", "image")].data["batch"]
    assert (batch["width"], batch["height"]) == (6, 4)  # the batch side by side
    video = journal[("trajectory", "video")].data["video"]
    assert (video["format"], video["frames"], video["fps"], video["width"], video["height"]) == ("apng", 5, 10, 7, 6)
    animation = png(video)
    assert getattr(animation, "n_frames", 1) == 5
    fig = journal[("trajectory", "image")].data["figure"]
    assert (fig["width"], fig["height"]) == (100, 75) and png(fig).size == (100, 75)
    for event in media.values():
        assert event.steps == {"env_steps": 512}

    [hparams] = [e for e in sb3_events(logger) if e.kind == "hparams"]
    assert hparams.data == {"lr": 3e-4, "algo": "PPO", "gae": True}
    meta = json.loads((logger.run_dir / "meta.json").read_text())
    assert meta["tracked"] == {"lr": 3e-4}
    assert meta["info"]["sb3_hparam_metrics"] == ["rollout/ep_rew_mean"]
    # the scalar of the same dump is unaffected, and SB3's csv got only what it can take
    assert by_namespace(sb3_events(logger))["train"][0].data == {"loss": 0.5}
    assert by_namespace(sb3_events(logger))["learner"][0].data == {"total_loss_avg": 0.5}
    columns, _ = read_csv(tmp_path / "sb3" / "progress.csv")
    assert columns == ["train/loss"]


def test_images_figures_and_videos_reach_mlflow_as_artifacts(tmp_path):
    """What SB3 records with `self.logger.record(key, Image(...) | Figure(...) |
    Video(...))` is uploaded to the MLflow run (embedded SQLite store) under the
    run directory's own `media/` paths, byte for byte; nothing counted as dropped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from journal_batch import journal_batch, with_saved_state
    from mlflow_server import tracker

    from rltrack.core.report import Report
    from rltrack.sinks.base import RunContext
    from rltrack.trackers.mlflow.backend import MlflowBackend

    logger = rltrack.make_logger(
        {"run": {"root": str(tmp_path / "runs"), "name": "media", "close_timeout": 300}, "backends": {"use": ["mlflow"]}}
    )
    sb3_logger = Logger(None, [RLTrackWriter(logger)])
    sb3_logger.record("eval/frame", Image(np.full((8, 10, 3), 200, dtype=np.uint8), "HWC"))
    figure = plt.figure(figsize=(2, 1.5), dpi=50)
    plt.plot([0, 1], [1, 0])
    sb3_logger.record("trajectory/figure", Figure(figure, close=True))
    sb3_logger.record("trajectory/video", Video(torch.rand(1, 4, 3, 6, 7), fps=10))
    sb3_logger.dump(step=256)
    sb3_logger.record("eval/frame", Image(np.zeros((8, 10, 3), dtype=np.uint8), "HWC"))
    sb3_logger.dump(step=512)
    assert logger.close(), "the agent did not deliver the run to MLflow within close_timeout"
    client, run_id = tracker(logger.run_dir)
    uploaded = sorted(f.path for folder in ("media/evaluator", "media/trajectory") for f in client.list_artifacts(run_id, folder))
    local = sorted(p.relative_to(logger.run_dir).as_posix() for p in (logger.run_dir / "media").rglob("*") if p.is_file())
    assert uploaded == local == ["media/evaluator/frame_256.png", "media/evaluator/frame_512.png", "media/trajectory/figure_256.png", "media/trajectory/video_256.png"]
    (tmp_path / "down").mkdir()  # MLflow 2.22 downloads only into a folder that exists
    for path in uploaded:
        downloaded = client.download_artifacts(run_id, path, str(tmp_path / "down"))
        assert Path(downloaded).read_bytes() == (logger.run_dir / path).read_bytes()
    counts = json.loads((logger.run_dir / "report.json").read_text())["counts"]
    assert not counts.get("mlflow.dropped")
    assert (counts["mlflow.delivered"]["image files"], counts["mlflow.delivered"]["video files"]) == (3, 1)
    # delivered again (as after a crash before the cursor was saved): the same files, none twice
    again = MlflowBackend()
    again.open(RunContext(logger.run_dir, logger.name, logger.config, Report()))
    with_saved_state(again, logger.run_dir).deliver(*journal_batch(logger.run_dir))
    again.close("finished")
    assert tracker(logger.run_dir)[1] == run_id
    assert sorted(f.path for folder in ("media/evaluator", "media/trajectory") for f in client.list_artifacts(run_id, folder)) == uploaded


def test_image_given_as_a_file_path_is_copied(tmp_path):
    logger = make_logger(tmp_path)
    source = tmp_path / "frame.jpg"
    PILImage.new("RGB", (4, 3), (0, 0, 255)).save(source)
    sb3_logger = Logger(None, [RLTrackWriter(logger)])
    sb3_logger.record("eval/frame", Image(str(source), "HWC"))
    sb3_logger.dump(7)
    logger.close()
    [event] = sb3_events(logger)
    record = event.data["frame"]
    assert (event.kind, event.namespace, record["path"], record["format"]) == ("image", "eval", "media/evaluator/frame_7.jpg", "jpg")  # filed under its stage
    assert (logger.run_dir / record["path"]).read_bytes() == source.read_bytes()


def test_sb3_logger_close_leaves_the_rltrack_logger_open_unless_asked(tmp_path):
    logger = make_logger(tmp_path)
    Logger(None, [RLTrackWriter(logger)]).close()
    logger.log_text("note", "still open")
    assert logger.flush(10)
    owned = make_logger(tmp_path, name="owned")
    Logger(None, [RLTrackWriter(owned, close_logger=True)]).close()
    assert json.loads((owned.run_dir / "meta.json").read_text())["status"] == "finished"
    logger.close()
    assert [e.data for e in logger.backends["memory"].events if e.kind == "text"] == [{"note": "still open"}]


def test_unencodable_media_is_counted_not_raised(tmp_path):
    logger = make_logger(tmp_path)
    sb3_logger = Logger(None, [RLTrackWriter(logger)])
    sb3_logger.record("train/bad", Image(np.zeros((3, 4)), "NCHW"))  # format does not match the shape
    sb3_logger.record("train/two_channels", Image(np.zeros((4, 4, 2)), "HWC"))
    sb3_logger.record("train/loss", 1.0)
    sb3_logger.dump(1)
    logger.close()
    assert [(e.kind, e.tag(k)) for e in sb3_events(logger) for k in e.data] == [("scalars", "train/loss"), ("scalars", "learner/total_loss_avg")]
    dropped = logger.report.as_dict()["counts"]["sb3.dropped"]
    assert len(dropped) == 2 and all("Image could not be encoded" in reason for reason in dropped)


def test_module_imports_without_sb3():
    code = (
        "import sys\n"
        "for name in ('stable_baselines3', 'torch'): sys.modules[name] = None\n"
        "import rltrack.adapters.sb3 as m\n"
        "assert m.CANONICAL['rollout/ep_rew_mean'] == 'collector/reward_mean'\n"
        "from rltrack.frameworks.canonical import vocabulary\n"
        "assert vocabulary()['collector/reward_mean']['sb3'] == ['rollout/ep_rew_mean']\n"
        "try:\n"
        "    from rltrack.adapters.sb3 import RLTrackWriter\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MissingExtraError") and "rltrack[sb3]" in done.stdout


# ---- attach and the callback on real models ----------------------------------


def test_attach_keeps_a_set_logger_and_is_idempotent(tmp_path):
    logger = make_logger(tmp_path)
    model = PPO("MlpPolicy", cartpole(), **PPO_KWARGS)
    sb3_logger = configure(str(tmp_path / "sb3"), ["csv", "json"])
    model.set_logger(sb3_logger)
    formats = list(sb3_logger.output_formats)
    writer = attach(model, logger)
    assert attach(model, logger) is writer
    assert model.logger is sb3_logger and sb3_logger.output_formats == [*formats, writer]
    logger.close()


def test_attach_joins_the_logger_sb3_builds_in_learn(tmp_path):
    logger = make_logger(tmp_path)
    model = PPO("MlpPolicy", cartpole(), verbose=1, tensorboard_log=str(tmp_path / "tb"), **PPO_KWARGS)
    writer = attach(model, logger)
    assert model._custom_logger is False  # SB3 still builds its default logger per learn()
    model.learn(ROLLOUT)
    names = [type(f).__name__ for f in model.logger.output_formats]
    assert names == ["HumanOutputFormat", "TensorBoardOutputFormat", "RLTrackWriter"]
    assert model.logger.get_dir() == str(tmp_path / "tb" / "PPO_1")
    assert writer.logger is logger and writer.train_iter_key == "time/iterations" and writer.rollout_steps == ROLLOUT
    from stable_baselines3 import DQN

    dqn_writer = attach(DQN("MlpPolicy", "CartPole-v1", buffer_size=1000, device="cpu"), logger)
    assert dqn_writer.train_iter_key == "train/n_updates" and dqn_writer.rollout_steps is None  # off-policy: gradient steps
    model.save(tmp_path / "saved.zip")
    with pytest.raises(ValueError, match="no env yet"):  # loaded without env: nothing to follow SB3's logger through
        attach(PPO.load(tmp_path / "saved.zip", device="cpu"), logger)
    logger.close()


def test_callback_alone_attaches_to_sb3s_own_logger(tmp_path):
    torch.set_num_threads(1)
    logger = make_logger(tmp_path, tracked=["algo", "env_id", "n_steps", "learning_rate"])
    model = PPO("MlpPolicy", cartpole(), verbose=0, tensorboard_log=str(tmp_path / "tb"), **PPO_KWARGS)
    model.learn(ROLLOUT * 2, callback=RLTrackCallback(logger))
    assert model._custom_logger is False  # SB3 still builds its default logger per learn()
    assert [type(f).__name__ for f in model.logger.output_formats] == ["TensorBoardOutputFormat", "RLTrackWriter"]
    assert (tmp_path / "tb" / "PPO_1").is_dir()
    logger.close()
    collector = by_namespace(sb3_events(logger))["collector"]
    native = [e for e in by_namespace(sb3_events(logger))["rollout"] if "ep_rew_mean" in e.data]  # the stage blocks: test_stages_sb3.py
    assert [e.steps["env_steps"] for e in native] == [ROLLOUT, 2 * ROLLOUT]
    assert {e.stage for e in native} == {"collector"}
    assert [e.steps["env_steps"] for e in collector if "episode_count" in e.data] == [ROLLOUT, 2 * ROLLOUT]
    meta = json.loads((logger.run_dir / "meta.json").read_text())
    assert meta["tracked"] == {"algo": "PPO", "env_id": "CartPole-v1", "n_steps": ROLLOUT // N_ENVS, "learning_rate": 3e-4}
    assert meta["info"]["framework"] == "stable-baselines3"
    [hparams] = [e for e in logger.backends["memory"].events if e.kind == "hparams"]
    assert hparams.data["total_timesteps"] == 2 * ROLLOUT and hparams.data["policy_class"] == "ActorCriticPolicy"


def test_attach_alone_records_the_hyperparameters_in_mlflow_and_wandb(tmp_path):
    """The README's first example (`attach(model, logger)`, no callback): the
    model's hyperparameters reach MLflow's params and W&B's config (typed), once
    per `learn()` whose hyperparameters differ (a second `learn()` changes
    `total_timesteps`), and none with `log_hparams=False`."""
    from library_readback import config, tracker_hparams

    torch.set_num_threads(1)
    logger = rltrack.make_logger(config(tmp_path / "runs", name="readme"))
    model = PPO("MlpPolicy", cartpole(), **PPO_KWARGS)
    attach(model, logger)
    model.learn(ROLLOUT)
    model.learn(2 * ROLLOUT, reset_num_timesteps=False)
    logger.close()
    sent = [e.data for e in rltrack.read_journal(logger.run_dir) if e.kind == "hparams"]
    assert [h["total_timesteps"] for h in sent] == [ROLLOUT, 3 * ROLLOUT]  # SB3 adds the timesteps done before
    assert sent[0] == {**model_hparams(model), "total_timesteps": ROLLOUT}
    params, wandb_config = tracker_hparams(logger.run_dir)
    assert params["algo"] == "PPO" and params["n_steps"] == str(ROLLOUT // N_ENVS) and params["gamma"] == "0.99"
    assert params["total_timesteps"] == str(ROLLOUT)  # MLflow keeps a param's first value (the second is in a tag)
    assert wandb_config["total_timesteps"] == 3 * ROLLOUT
    assert wandb_config["n_steps"] == ROLLOUT // N_ENVS and wandb_config["gamma"] == 0.99 and wandb_config["env_id"] == "CartPole-v1"
    assert json.loads((logger.run_dir / "meta.json").read_text())["info"]["framework"] == "stable-baselines3"

    quiet = make_logger(tmp_path / "quiet")
    quiet_model = PPO("MlpPolicy", cartpole(), **PPO_KWARGS)
    attach(quiet_model, quiet, log_hparams=False)
    quiet_model.learn(ROLLOUT)
    quiet.close()
    assert not [e for e in quiet.backends["memory"].events if e.kind == "hparams"]


def test_save_freq_below_an_eval_callback_warns(tmp_path):
    logger = make_logger(tmp_path)
    model = PPO("MlpPolicy", cartpole(), **PPO_KWARGS)
    EvalCallback(cartpole(), callback_on_new_best=(child := RLTrackCallback(logger, save_freq=10, attach=False)))
    with pytest.warns(UserWarning, match="saves the best model only"):
        child.init_callback(model)
    logger.close()


def test_callback_after_eval_checkpoints_only_improvements(tmp_path):
    logger = make_logger(tmp_path)
    model = PPO("MlpPolicy", cartpole(), **PPO_KWARGS)
    child = RLTrackCallback(logger, attach=False, log_hparams=False)
    eval_callback = EvalCallback(cartpole(), callback_after_eval=child)  # called after every evaluation
    child.init_callback(model)
    for timesteps, best in [(100, 1.0), (200, 1.0), (300, 2.5)]:
        model.num_timesteps = timesteps
        eval_callback.best_mean_reward = best
        child.on_step()
    staging = child._staging
    assert staging is not None and list(staging.iterdir()) == []  # each staged file goes once log_checkpoint has copied it
    child.on_training_end()  # removes its temporary files once rltrack copied them
    assert not staging.exists()
    logger.close()
    checkpoints = [e.data for e in logger.backends["memory"].events if e.kind == "artifact"]
    # named by train_iter, as DI-engine names them by its learner iteration: 100 and 300 timesteps are rounds 0 and 1
    assert [(c["iteration"], c["metric"], c["best"]) for c in checkpoints] == [(0, 1.0, True), (1, 2.5, True)]
    ckpt = logger.run_dir / "ckpt"
    assert sorted(p.name for p in ckpt.iterdir()) == ["ckpt_best.pth.tar", "ckpt_best.zip", "iteration_0.pth.tar", "iteration_0.zip", "iteration_1.pth.tar", "iteration_1.zip"]
    assert PPO.load(ckpt / "ckpt_best.zip", device="cpu").n_steps == model.n_steps
    assert (ckpt / "ckpt_best.zip").read_bytes() == (ckpt / "iteration_1.zip").read_bytes()


def test_checkpoints_load_with_torch_as_di_engines_do(tmp_path):
    """DI-engine's learner saves `{model, optimizer, last_iter, last_step}` with
    `torch.save`; DI-engine reads it back (`ding.utils.file_helper.read_file`)
    with `torch.load(path, map_location="cpu")`, whose `weights_only` is True
    by default since torch 2.6: the dict holds only what that loader takes.
    Then `load_state_dict`. SB3's own zip lies beside it."""
    from stable_baselines3 import SAC

    logger = make_logger(tmp_path)
    model = PPO("MlpPolicy", cartpole(), **PPO_KWARGS)
    model.learn(2 * ROLLOUT, callback=RLTrackCallback(logger, save_freq=ROLLOUT // N_ENVS, log_hparams=False))
    sac = SAC("MlpPolicy", "Pendulum-v1", learning_starts=10, device="cpu", policy_kwargs={"net_arch": [16]})
    sac_logger = make_logger(tmp_path, name="sac")
    sac.learn(30, callback=RLTrackCallback(sac_logger, save_freq=30, log_hparams=False))
    logger.close()
    sac_logger.close()
    ckpt = logger.run_dir / "ckpt"
    state = torch.load(ckpt / "iteration_2.pth.tar", map_location="cpu")
    assert set(state) == {"model", "optimizer", "last_iter", "last_step"}
    assert (state["last_iter"], state["last_step"]) == (2, 2 * ROLLOUT)
    fresh = PPO("MlpPolicy", cartpole(), **PPO_KWARGS)
    fresh.policy.load_state_dict(state["model"])
    fresh.policy.optimizer.load_state_dict(state["optimizer"])
    saved = PPO.load(ckpt / "iteration_2.zip", device="cpu")  # SB3's zip of the same moment
    assert saved.num_timesteps == 2 * ROLLOUT
    for name, tensor in saved.policy.state_dict().items():
        assert torch.equal(fresh.policy.state_dict()[name], tensor)
    sac_state = torch.load(sac_logger.run_dir / "ckpt" / "iteration_19.pth.tar", map_location="cpu")
    assert set(sac_state) == {"model", "optimizer_actor", "optimizer_critic", "optimizer_ent_coef", "last_iter", "last_step"}
    assert (sac_state["last_iter"], sac_state["last_step"]) == (19, 30) == (sac._n_updates - 1, sac.num_timesteps)  # saved before the last train()


def test_a_zip_that_cannot_be_written_is_counted_not_raised(tmp_path):
    logger = make_logger(tmp_path)
    model = PPO("MlpPolicy", cartpole(), **PPO_KWARGS)
    child = RLTrackCallback(logger, attach=False, log_hparams=False)
    eval_callback = EvalCallback(cartpole(), callback_after_eval=child)
    child.init_callback(model)
    (logger.run_dir / "ckpt" / "iteration_0.zip").mkdir(parents=True)  # in the way of SB3's zip
    eval_callback.best_mean_reward = 1.0
    child.on_step()  # training goes on
    logger.close()
    assert torch.load(logger.run_dir / "ckpt" / "iteration_0.pth.tar", map_location="cpu")["last_iter"] == 0
    counts = json.loads((logger.run_dir / "report.json").read_text())["counts"]["sb3.dropped"]
    assert counts == {"SB3 zip beside a checkpoint not written (IsADirectoryError)": 1}


def test_a_dqn_checkpoint_is_laid_out_as_di_engines(tmp_path):
    """A real DI-engine 0.5.3 DQN checkpoint (its layout recorded in
    tests/helpers/fixtures/dingine_dqn_cartpole_advanced/ckpt_structure.json)
    against SB3's DQN through `RLTrackCallback`: the same keys and kinds, but
    `target_model`, which SB3 keeps inside the policy's state dict (`q_net_target.*`)."""
    from stable_baselines3 import DQN

    fixture = Path(__file__).parents[1] / "helpers" / "fixtures" / "dingine_dqn_cartpole_advanced" / "ckpt_structure.json"
    di = json.loads(fixture.read_text())["top_level"]
    logger = make_logger(tmp_path)
    model = DQN("MlpPolicy", "CartPole-v1", learning_starts=20, train_freq=4, device="cpu", policy_kwargs={"net_arch": [16]})
    model.learn(100, callback=RLTrackCallback(logger, save_freq=100, log_hparams=False))
    logger.close()
    [written] = (logger.run_dir / "ckpt").glob("iteration_*.pth.tar")
    ours = torch.load(written, map_location="cpu")
    assert set(ours) == set(di) - {"target_model"}
    assert any(key.startswith("q_net_target.") for key in ours["model"]) and any(key.startswith("q_net.") for key in ours["model"])
    assert all(isinstance(v, torch.Tensor) for v in ours["model"].values()) and di["model"]["kind"] == "state_dict"
    assert sorted(ours["optimizer"]) == di["optimizer"]["keys"] == ["param_groups", "state"]
    assert type(ours["last_iter"]).__name__ == di["last_iter"]["kind"] == type(ours["last_step"]).__name__ == di["last_step"]["kind"] == "int"
    assert written.name == f"iteration_{ours['last_iter']}.pth.tar" and ours["last_step"] == 100  # named by its iteration, as DI-engine's


def test_model_hparams_are_json_friendly():
    model = PPO("MlpPolicy", cartpole(), learning_rate=lambda progress: 1e-3 * progress, **PPO_KWARGS)
    hparams = model_hparams(model)
    assert json.loads(json.dumps(hparams)) == hparams
    assert hparams["algo"] == "PPO" and hparams["env_id"] == "CartPole-v1"
    assert hparams["learning_rate"] == pytest.approx(1e-3)  # a schedule: its value at the start
    assert hparams["clip_range"] == pytest.approx(0.2)
    assert hparams["gamma"] == 0.99 and hparams["n_steps"] == ROLLOUT // N_ENVS and hparams["batch_size"] == 256
    assert hparams["policy_kwargs"] == {"net_arch": [32, 32]}
    assert hparams["action_space"] == "Discrete(2)" and hparams["device"] == "cpu"
    assert not {"policy", "env", "rollout_buffer", "num_timesteps", "lr_schedule"} & set(hparams)


# ---- real PPO runs, compared with SB3 alone ----------------------------------


def run_ppo(folder: Path, logger=None):
    """PPO on CartPole-v1 with SB3's own csv output and an EvalCallback; with
    rltrack attached (writer, hyperparameters, periodic and best checkpoints)
    when `logger` is given."""
    model = PPO("MlpPolicy", cartpole(), verbose=0, **PPO_KWARGS)
    model.set_logger(configure(str(folder), ["csv"]))
    eval_env = DummyVecEnv([lambda: Monitor(gym.make("CartPole-v1"))] * 3)  # the 3 episodes side by side
    eval_env.seed(0)
    callbacks = []
    best = None
    if logger is not None:
        # stages=False: SB3's own values and their canonical twins are checked here; the stage blocks in test_stages_sb3.py
        attach(model, logger, stages=False)
        best = RLTrackCallback(logger, stages=False)
        callbacks.append(RLTrackCallback(logger, save_freq=EVAL_FREQ * 2 // N_ENVS, stages=False))  # in calls, as SB3 counts
    callbacks.append(EvalCallback(eval_env, callback_on_new_best=best, eval_freq=EVAL_FREQ // N_ENVS, n_eval_episodes=3, verbose=0, warn=False))
    model.learn(TIMESTEPS, callback=callbacks)
    model.logger.close()
    return model


@pytest.fixture(scope="module")
def ppo_runs(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        root = tmp_path_factory.mktemp("ppo")
        run_ppo(root / "sb3_alone")
        logger = rltrack.make_logger(
            run={"root": str(root / "runs"), "name": "ppo", "tracked": ["algo", "env_id", "n_steps"]},
            backends={"use": ["local", "memory"]},
        )
        model = run_ppo(root / "sb3_with_rltrack", logger)
        logger.close()
    finally:
        torch.set_num_threads(threads)
    return root, logger, model


def test_sb3_progress_csv_is_unchanged(ppo_runs):
    root, _, _ = ppo_runs
    alone_columns, alone = read_csv(root / "sb3_alone" / "progress.csv")
    with_columns, with_rltrack = read_csv(root / "sb3_with_rltrack" / "progress.csv")
    assert set(with_columns) == set(alone_columns)
    assert "rollout/ep_rew_mean" in with_columns and "eval/mean_reward" in with_columns
    # one row per SB3 dump: TIMESTEPS / ROLLOUT iterations plus TIMESTEPS / EVAL_FREQ evaluations
    assert len(with_rltrack) == len(alone) == TIMESTEPS // ROLLOUT + TIMESTEPS // EVAL_FREQ
    wall_clock = {"time/fps", "time/time_elapsed"}
    for row_alone, row_with in zip(alone, with_rltrack):
        assert {k: v for k, v in row_with.items() if k not in wall_clock} == {k: v for k, v in row_alone.items() if k not in wall_clock}
        for key in wall_clock:
            assert (row_with[key] == "") == (row_alone[key] == "")


def test_rltrack_has_sb3s_values_at_sb3s_steps(ppo_runs):
    root, logger, model = ppo_runs
    _, rows = read_csv(root / "sb3_with_rltrack" / "progress.csv")
    expected = [(int(r["time/total_timesteps"]), float(r["rollout/ep_rew_mean"])) for r in rows if r["rollout/ep_rew_mean"]]
    assert [s for s, _ in expected] == [ROLLOUT * i for i in range(1, TIMESTEPS // ROLLOUT + 1)]
    assert expected[-1][0] == model.num_timesteps

    events = list(rltrack.read_journal(logger.run_dir))
    sb3 = [e for e in events if e.source == "sb3"]
    assert len({e.time for e in sb3}) == len(rows)  # every SB3 dump arrived, as one set of events
    collector = [e for e in sb3 if e.namespace == "collector" and "reward_mean" in e.data]
    rollout = [e for e in sb3 if e.namespace == "rollout" and "ep_rew_mean" in e.data]  # as SB3 wrote it, beside its twin
    assert [(e.steps["env_steps"], e.data["reward_mean"]) for e in collector] == expected
    assert [(e.steps["env_steps"], e.data["ep_rew_mean"]) for e in rollout] == expected
    assert [e.steps["train_iter"] for e in collector] == list(range(1, len(expected) + 1))

    memory = logger.backends["memory"]
    assert memory.steps["collector/reward_mean"] == memory.steps["rollout/ep_rew_mean"] == [s for s, _ in expected]
    assert memory.metrics["learner/total_loss_avg"] == memory.metrics["train/loss"]
    assert not any(name.startswith("collector/ep_") or name == "learner/loss" for name in memory.metrics)  # no key rewritten

    # rltrack's own progress.csv and TensorBoard file
    columns, local_rows = read_csv(logger.run_dir / "progress.csv")
    assert {"collector/reward_mean", "rollout/ep_rew_mean", "learner/total_loss_avg", "evaluator/reward_mean", "env_steps", "train_iter"} <= set(columns)
    local = [(int(r["env_steps"]), float(r["collector/reward_mean"])) for r in local_rows if r["collector/reward_mean"]]
    assert local == expected
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(logger.run_dir / "log" / "serial"), size_guidance={"scalars": 0})
    accumulator.Reload()
    scalars = accumulator.Scalars("collector/reward_mean")
    assert [(s.step, round(s.value, 3)) for s in scalars] == [(s, round(v, 3)) for s, v in expected]
    assert "time/time_elapsed" in accumulator.Tags()["scalars"]


def test_eval_callback_gives_evaluator_metrics_and_best_checkpoint(ppo_runs):
    root, logger, _ = ppo_runs
    _, rows = read_csv(root / "sb3_with_rltrack" / "progress.csv")
    evals = [(int(r["time/total_timesteps"]), float(r["eval/mean_reward"])) for r in rows if r["eval/mean_reward"]]
    assert [s for s, _ in evals] == list(range(EVAL_FREQ, TIMESTEPS + 1, EVAL_FREQ))
    events = list(rltrack.read_journal(logger.run_dir))
    evaluator = [e for e in events if e.namespace == "evaluator" and e.kind == "scalars"]
    assert [(e.steps["env_steps"], e.data["reward_mean"]) for e in evaluator] == evals
    assert all({"reward_mean", "avg_envstep_per_episode"} <= set(e.data) for e in evaluator)
    native = [e for e in events if e.namespace == "eval" and e.kind == "scalars"]  # EvalCallback's keys as SB3 wrote them
    assert [(e.steps["env_steps"], e.data["mean_reward"]) for e in native] == evals and all("mean_ep_length" in e.data for e in native)
    # EvalCallback's dumps (no time/iterations) have PPO's rounds collected so far as train_iter, as the collector's have
    collector = [e for e in events if e.namespace == "collector" and "reward_mean" in e.data]
    for e in evaluator:
        assert e.steps["train_iter"] == max(c.steps["train_iter"] for c in collector if c.steps["env_steps"] <= e.steps["env_steps"])

    checkpoints = [e.data for e in events if e.kind == "artifact" and e.namespace == "ckpt"]
    best_rewards = [m for i, (_, m) in enumerate(evals) if m > max([-math.inf] + [r for _, r in evals[:i]])]
    assert [c["metric"] for c in checkpoints if c["metric"] is not None] == best_rewards
    assert all(c["best"] for c in checkpoints if c["metric"] is not None)
    periodic = [c["iteration"] for c in checkpoints if c["metric"] is None]
    assert periodic == [EVAL_FREQ * 2 // ROLLOUT, EVAL_FREQ * 4 // ROLLOUT]  # named by train_iter, as DI-engine
    for c in checkpoints:
        assert (logger.run_dir / c["path"]).is_file()
    best = logger.run_dir / "ckpt" / "ckpt_best.pth.tar"
    assert torch.load(best, map_location="cpu")["last_step"] in [s for s, _ in evals]
    loaded = PPO.load(best.with_name("ckpt_best.zip"), device="cpu")
    assert loaded.n_steps == ROLLOUT // N_ENVS
    [best_iteration] = [c["iteration"] for c in checkpoints if c["metric"] == best_rewards[-1]]
    assert best.read_bytes() == (logger.run_dir / "ckpt" / f"iteration_{best_iteration}.pth.tar").read_bytes()


def test_run_directory_records_the_run(ppo_runs):
    _, logger, _ = ppo_runs
    meta = json.loads((logger.run_dir / "meta.json").read_text())
    assert meta["status"] == "finished"
    assert meta["tracked"] == {"algo": "PPO", "env_id": "CartPole-v1", "n_steps": ROLLOUT // N_ENVS}
    hparams = [e for e in rltrack.read_journal(logger.run_dir) if e.kind == "hparams"]
    assert len(hparams) == 1  # two callbacks of ours, one set of hyperparameters
    # a table per SB3 dump in rltrack's text logs (SB3's dump is rltrack's dump)
    dumps = [e.steps["env_steps"] for e in rltrack.read_journal(logger.run_dir) if e.namespace == "evaluator" and e.kind == "scalars"]
    text = (logger.run_dir / "log" / "evaluator" / "evaluator_logger.txt").read_text()
    assert text.count("reward_mean") == len(dumps) == TIMESTEPS // EVAL_FREQ
    for step in dumps:
        assert f"env_steps={step} " in text


def test_example_runs(tmp_path, capsys):
    import runpy

    example = Path(__file__).resolve().parents[2] / "examples" / "sb3_ppo_cartpole.py"
    run_dir = runpy.run_path(str(example), run_name="example")["main"](["--timesteps", "1024", "--root", str(tmp_path / "runs"), "--backends", "local,console"])
    out = capsys.readouterr().out
    assert f"tensorboard --logdir {run_dir / 'log' / 'serial'}" in out
    assert (run_dir / "ckpt" / "ckpt_best.pth.tar").is_file()
    assert json.loads((run_dir / "meta.json").read_text())["tracked"]["env_id"] == "CartPole-v1"
    namespaces = {e.namespace for e in rltrack.read_journal(run_dir) if e.kind == "scalars"}
    assert {"collector", "evaluator", "learner", "time"} <= namespaces
