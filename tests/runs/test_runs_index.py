"""The experiment database's data layer on a root of real runs (tests/helpers/runs_fixture.py):
readers of rltrack and foreign dirs, `Run`, ids, the SQLite index (incremental
equals rebuilt, answers without the directories) and the `where` language."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pandas")
pytest.importorskip("stable_baselines3")
pytest.importorskip("tensorboardX")

import rltrack.runs as runs  # noqa: E402
from rltrack.runs.index import rows, update_run  # noqa: E402
from rltrack.runs.query import QueryError  # noqa: E402
from rltrack.runs.records import config_literal  # noqa: E402
from runs_fixture import DI_CONFIG_TEXT, MadeRun, runs_root_copy  # noqa: E402

ID_FORMAT = re.compile(r"^(?P<task>.+)/(?P<date>\d{4}/\d{2}/\d{2})/(?P<time>\d{2}-\d{2}-\d{2}-\d{6}) (?P<host>\S+)(?P<hparams>( \S+=\S*)*)$")


@pytest.fixture
def root(tmp_path_factory, tmp_path) -> tuple[Path, list[MadeRun]]:
    target = tmp_path / "root"
    return target, runs_root_copy(tmp_path_factory, target)


def by_name(made: list[MadeRun]) -> dict[str, MadeRun]:
    return {m.name: m for m in made}


def test_every_run_is_found_with_its_writer_and_source(root) -> None:
    path, made = root
    table = runs.query(path)
    assert sorted(table["path"]) == sorted(str(m.path) for m in made)
    for m in made:
        row = table[table["path"] == str(m.path)].iloc[0]
        assert (row["writer"], row["source"]) == (m.writer, m.source), m.name


def test_ids_have_the_documented_format(root) -> None:
    path, made = root
    for m in made:
        run = runs.load(path / m.path)
        match = ID_FORMAT.match(run.id)
        assert match, run.id
        assert match["task"] == run.task
        start = run.start_time
        assert match["date"] == f"{start:%Y/%m/%d}" and match["time"] == f"{start:%H-%M-%S-%f}"
        assert match["host"] == run.host
        expected = {k: str(v) for k, v in run.tracked.items()}
        assert dict(pair.split("=", 1) for pair in match["hparams"].split()) == expected
        if m.writer == "rltrack":
            meta = json.loads((path / m.path / "meta.json").read_text())
            assert run.task == meta["task"] and run.host == meta["host"]
            assert start.timestamp() == pytest.approx(meta["start_unix"], abs=1e-6)
            assert expected == {k: str(v) for k, v in m.hparams.items() if k in ("env_id", "lr")}
        assert runs.load(run.id, root=path).path.resolve() == (path / m.path).resolve()  # ids resolve through the index


@pytest.mark.parametrize(
    ("where", "predicate"),
    [
        ("lr<0.01 and env_id=='CartPole-v1'", lambda h: h.get("lr", 1) < 0.01 and h.get("env_id") == "CartPole-v1"),
        ("0.0003 <= lr < 0.01", lambda h: 0.0003 <= h.get("lr", 1) < 0.01),
        ("env_id in ('Pendulum-v1', 'Hopper-v4') or not lr > 0.001", lambda h: h.get("env_id") in ("Pendulum-v1", "Hopper-v4") or ("lr" in h and not h["lr"] > 0.001)),
        ("env/env_id == 'CartPole-v1' and policy/learn/learning_rate < 0.01", lambda h: h.get("env/env_id") == "CartPole-v1"),
        ("lr == None", lambda h: "lr" not in h),
        ("col('opt/eps') > 0", lambda h: h.get("opt/eps", 0) > 0),
    ],
)
def test_where_returns_exactly_the_expected_runs(root, where, predicate) -> None:
    path, made = root
    expected = sorted(str(m.path) for m in made if predicate(m.hparams))
    assert expected, "the fixture must hold runs that match"
    assert sorted(runs.query(path, where=where)["path"]) == expected


def test_where_over_index_columns_task_and_metrics(root) -> None:
    path, made = root
    names = by_name(made)
    assert sorted(runs.query(path, where="source in ['sb3', 'acme'] and writer == 'rltrack'")["path"]) == sorted(str(names[n].path) for n in ("sb3", "acme"))
    best = {m.name: max(m.rewards) for m in made if m.rewards and m.writer != "di-engine"}
    over = runs.query(path, where="best/collector/reward_mean > 8 and source != 'sb3'", sort="-best/collector/reward_mean")
    assert list(over["path"]) == [str(names[n].path) for n in sorted((n for n, b in best.items() if b > 8), key=lambda n: -best[n])]
    assert list(runs.query(path, task="cartpole")["task"].unique()) == ["cartpole"]
    assert set(runs.query(path, task="*cheetah")["path"]) == {str(names["spinup"].path)}


@pytest.mark.parametrize(
    "where",
    ["__import__('os').system('touch pwned')", "lr.__class__", "(lambda: 1)()", "lr + 1 > 2", "[x for x in lr]", "lr <", "open('x')", "unknown_column > 1"],
)
def test_where_refuses_what_is_not_a_condition_over_columns(root, where, tmp_path, monkeypatch) -> None:
    path, _ = root
    monkeypatch.chdir(tmp_path)
    with pytest.raises(QueryError) as caught:
        runs.query(path, where=where)
    assert where.split("(")[0].split(" ")[0].strip("_[") in str(caught.value) or "column" in str(caught.value)
    assert not (tmp_path / "pwned").exists()


def test_foreign_and_rltrack_values_share_canonical_names(root) -> None:
    path, made = root
    for m in made:
        if not m.rewards:
            continue
        run = runs.load(path / m.path)
        key = "evaluator/reward_mean" if m.writer == "di-engine" else "collector/reward_mean"
        assert [v for _, v in run.metrics[key]] == pytest.approx(m.rewards), m.name
    native = by_name(made)["sb3_native"]
    with (path / native.path / "progress.csv").open() as f:  # SB3's own file, read independently
        sb3_rows = [r for r in csv.DictReader(f) if r["rollout/ep_rew_mean"]]
    run = runs.load(path / native.path)
    expected = [(int(r["time/total_timesteps"]), float(r["rollout/ep_rew_mean"])) for r in sb3_rows]
    assert run.metrics["collector/reward_mean"] == expected  # both sides parse the same decimal text
    assert run.metrics["rollout/ep_rew_mean"] == expected  # native kept
    di = runs.load(path / by_name(made)["di"].path)
    assert [s for s, _ in di.metrics["evaluator/reward_mean"]] == [0, 1000, 2000]
    assert di.df.query("key == 'evaluator/reward_mean'")["train_iter"].tolist() == [0, 10, 20]
    assert di.config["env"]["max_episode_steps"] == float("inf") and di.task == "cartpole_dqn"


def test_a_tune_trial_whose_keys_look_like_sb3s_is_read_as_tune(ray_cluster, tmp_path) -> None:
    """A Tune trial's folder holds a progress.csv too (Tune's CSV logger),
    whose columns look like SB3's when the trainable reports `{"train":
    {"loss": ...}}` (`train/loss`). The libraries' folder readers are tried
    by name, SB3's before Tune's: SB3's leaves a folder with a `result.json`
    to Tune's."""
    from ray import tune

    from rltrack.runs.readers import format_of

    def trainable(config: dict) -> None:
        for i in range(1, 3):
            tune.report({"train": {"loss": 1.0 / i}, "time": {"total_timesteps": 100 * i}})

    tune.run(trainable, storage_path=str(tmp_path), name="sb3_like", verbose=0)
    (trial,) = [p for p in (tmp_path / "sb3_like").iterdir() if (p / "result.json").is_file()]
    with (trial / "progress.csv").open(newline="") as f:
        assert {"train/loss", "time/total_timesteps"} <= set(next(csv.reader(f)))  # what SB3's reader takes for SB3's
    assert format_of(trial).name == "tune"
    table = runs.query(tmp_path)
    assert list(table["writer"]) == ["tune"] and list(table["path"]) == [str(trial.relative_to(tmp_path))]


def test_run_df_timelog_checkpoints_of_a_plain_run(root) -> None:
    path, made = root
    m = by_name(made)["plain"]
    run = runs.load(path / m.path)
    rewards = run.df[run.df["key"] == "collector/reward_mean"]
    assert rewards["value"].tolist() == m.rewards
    assert rewards["env_steps"].tolist() == [0, 10, 20] and rewards["train_iter"].tolist() == [0, 1, 2]
    assert set(rewards["namespace"]) == {"collector"} and rewards["time"].notna().all()
    assert len(run.timelog["train"]) == 3 and all(d >= 0 for d in run.timelog["train"])
    assert [p.name for p in run.checkpoints] == ["ckpt_best.pth.tar", "iteration_2.pth.tar"]
    assert run.hparams == m.hparams and run.source == "plain" and run.status == "finished"
    assert isinstance(run.start_time, dt.datetime)


def test_rebuilt_index_equals_the_incremental_one(root) -> None:
    path, made = root
    for m in reversed(made):  # as Loggers would, one run at a time, in another order than the walk
        assert update_run(path / m.path, path)
    runs.refresh(path)
    incremental = rows(path)
    plain = path / by_name(made)["plain"].path
    meta = json.loads((plain / "meta.json").read_text())
    meta["status"] = "killed"  # a run that changed after it was indexed
    (plain / "meta.json").write_text(json.dumps(meta))
    shutil.rmtree(path / by_name(made)["acme"].path)  # and one that went away
    counts = runs.refresh(path)
    assert (counts["updated"], counts["removed"], counts["added"]) == (1, 1, 0)
    incremental = rows(path)
    assert [r["status"] for r in incremental if r["path"] == str(by_name(made)["plain"].path)] == ["killed"]
    runs.rebuild(path)
    assert rows(path) == incremental and len(incremental) == len(made) - 1


def test_queries_answer_from_the_index_without_the_directories(root, tmp_path) -> None:
    path, made = root
    before = runs.query(path, where="lr < 0.01")
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    for child in list(path.iterdir()):
        if child.name != "rltrack_index.db":
            shutil.move(str(child), str(moved / child.name))
    after = runs.query(path, where="lr < 0.01", refresh_index=False)
    assert after.equals(before) and len(after) > 0


def test_config_literal_reads_di_engine_and_refuses_code(tmp_path) -> None:
    config = tmp_path / "total_config.py"
    config.write_text(DI_CONFIG_TEXT)
    assert config_literal(config)["env"]["max_episode_steps"] == float("inf")
    config.write_text("exp_config = {'a': __import__('os').getcwd()}\n")
    with pytest.raises(ValueError, match="not a config literal"):
        config_literal(config)
    config.write_text("import os\n")
    with pytest.raises(ValueError, match="total_config.py"):
        config_literal(config)
