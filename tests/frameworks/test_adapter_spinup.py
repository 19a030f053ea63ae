"""The SpinningUp drop-in `EpochLogger`: a short VPG-style loop, then
progress.txt read back with pandas and compared with what rltrack received
(memory backend and journal), statistics against numpy on the stored data,
SpinningUp's printed table, config.json and savers, and late keys."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest

import rltrack
from rltrack.adapters.spinup import CANONICAL, EpochLogger, convert_json
from rltrack.journal import read_journal


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLTRACK_CONFIG", raising=False)
    monkeypatch.delenv("RLTRACK_BACKENDS", raising=False)


def config(tmp_path, **run):
    return {"run": {"root": str(tmp_path / "runs"), **run}, "backends": {"use": ["memory"]}}


def vpg_style_loop(logger, epochs=4, steps_per_epoch=200, seed=0, test_from=None):
    """What SpinningUp's vpg.py does with its logger, with a fake environment.
    Returns what was stored per epoch, for the numpy reference."""
    rng = np.random.default_rng(seed)
    stored = []
    for epoch in range(epochs):
        kept = {"EpRet": [], "EpLen": [], "VVals": [], "TestEpRet": []}
        ep_ret, ep_len = 0.0, 0
        for t in range(steps_per_epoch):
            v = np.float32(rng.normal())
            logger.store(VVals=v)
            kept["VVals"].append(v)
            ep_ret += float(rng.normal(1.0, 0.5))
            ep_len += 1
            if rng.random() < 0.08 or t == steps_per_epoch - 1:
                logger.store(EpRet=ep_ret, EpLen=ep_len)
                kept["EpRet"].append(ep_ret)
                kept["EpLen"].append(ep_len)
                ep_ret, ep_len = 0.0, 0
        logger.store(LossPi=float(rng.normal()), LossV=float(rng.random()), KL=1e-3, Entropy=0.69, DeltaLossPi=-0.01, DeltaLossV=-0.2)
        if test_from is not None and epoch >= test_from:
            returns = rng.normal(50, 5, size=3)
            logger.store(TestEpRet=returns)  # an array per store: SpinningUp concatenates them
            kept["TestEpRet"].extend(returns.tolist())
        logger.log_tabular("Epoch", epoch)
        logger.log_tabular("EpRet", with_min_and_max=True)
        logger.log_tabular("EpLen", average_only=True)
        logger.log_tabular("VVals", with_min_and_max=True)
        if test_from is not None and epoch >= test_from:
            logger.log_tabular("TestEpRet", with_min_and_max=True)
        logger.log_tabular("TotalEnvInteracts", (epoch + 1) * steps_per_epoch)
        for key in ("LossPi", "LossV", "DeltaLossPi", "DeltaLossV", "Entropy", "KL"):
            logger.log_tabular(key, average_only=True)
        logger.log_tabular("Time", 0.5 * (epoch + 1))
        logger.dump_tabular()
        stored.append(kept)
    return stored


def column_namespace(column):
    if "TestEp" in column:
        return "evaluator"
    if "EpRet" in column or "EpLen" in column:
        return "collector"
    return "time" if column == "Time" else "learner"


def test_progress_txt_equals_what_rltrack_received_and_numpy(tmp_path):
    out = tmp_path / "data" / "vpg" / "vpg_s0"
    logger = EpochLogger(output_dir=str(out), exp_name="vpg", rltrack_config=config(tmp_path))
    stored = vpg_style_loop(logger, epochs=4)
    logger.close()

    df = pd.read_csv(out / "progress.txt", sep="\t", float_precision="round_trip")  # pandas 2.1's default parser can miss the last digit
    assert list(df.columns) == [
        "Epoch", "AverageEpRet", "StdEpRet", "MaxEpRet", "MinEpRet", "EpLen", "AverageVVals", "StdVVals", "MaxVVals",
        "MinVVals", "TotalEnvInteracts", "LossPi", "LossV", "DeltaLossPi", "DeltaLossV", "Entropy", "KL", "Time",
    ]  # fmt: skip
    assert len(df) == 4

    # statistics against numpy on the stored data (float64, std with ddof=0)
    for epoch, kept in enumerate(stored):
        row = df.iloc[epoch]
        for key in ("EpRet", "VVals"):
            x = np.asarray(kept[key], dtype=np.float64)
            assert row[f"Average{key}"] == pytest.approx(np.mean(x), rel=1e-12)
            assert row[f"Std{key}"] == pytest.approx(np.std(x), rel=1e-12)
            assert row[f"Max{key}"] == np.max(x) and row[f"Min{key}"] == np.min(x)
        assert row["EpLen"] == pytest.approx(np.mean(kept["EpLen"]), rel=1e-12)

    # every cell equals what rltrack received, at the steps the row gives
    memory = logger.rltrack.backends["memory"]
    events = [e for e in memory.events if e.kind in ("scalars", "timing")]
    for column in df.columns:
        if column in ("Epoch", "TotalEnvInteracts"):
            continue
        assert memory.metrics[column] == df[column].tolist(), column  # under its name as written
        assert {e.stage for e in events if column in e.data and e.namespace == ""} == {column_namespace(column)}  # filed under its stage
    for epoch in range(4):
        at = [e for e in events if e.steps.get("epoch") == epoch]
        assert {e.filed_under for e in at} == {"collector", "learner", "time"}
        assert all(list(e.steps) == ["env_steps", "epoch"] and e.steps["env_steps"] == df["TotalEnvInteracts"][epoch] for e in at)
    # canonical names beside the native ones: the stage blocks, from the stored values
    assert memory.metrics["collector/reward_mean"] == pytest.approx(df["AverageEpRet"].tolist(), rel=1e-12)
    assert memory.metrics["collector/reward_max"] == df["MaxEpRet"].tolist()
    assert memory.metrics["collector/avg_envstep_per_episode"] == pytest.approx(df["EpLen"].tolist(), rel=1e-12)
    assert memory.metrics["learner/policy_loss_avg"] == pytest.approx(df["LossPi"].tolist(), rel=1e-12)
    assert memory.metrics["collector/envstep_count"] == [200] * 4  # TotalEnvInteracts grew by 200 per epoch
    assert memory.metrics["collector/episode_count"] == [len(kept["EpRet"]) for kept in stored]
    assert "collector/collect_time" not in memory.metrics and "learner/cur_lr_avg" not in memory.metrics  # not logged
    assert all(e.source == "spinup" for e in events)
    # aggregated upstream: the log_tabular(key) statistics; Time is a timing
    assert {e.preaggregated for e in events if "AverageEpRet" in e.data} == {True}
    assert [e.kind for e in events if e.filed_under == "time"] == ["timing"] * 4
    journal = [e for e in read_journal(logger.rltrack.run_dir) if e.filed_under == "collector" and e.kind == "scalars"]
    assert [e.data["AverageEpRet"] for e in journal if e.preaggregated] == df["AverageEpRet"].tolist()
    assert [e.data["reward_min"] for e in journal if not e.preaggregated] == df["MinEpRet"].tolist()

    # the run: named after output_dir, under the config's root, with SpinningUp's dir in its info
    assert logger.rltrack.run_dir == tmp_path / "runs" / "vpg_s0"
    meta = json.loads((logger.rltrack.run_dir / "meta.json").read_text())
    assert meta["status"] == "finished"
    assert meta["info"] == {"framework": "spinup", "output_dir": str(out), "exp_name": "vpg"}


def test_printed_table_is_spinningups(tmp_path, capsys):
    logger = EpochLogger(output_dir=str(tmp_path / "out"), send_to_rltrack=False)
    logger.store(EpRet=1.0)
    logger.store(EpRet=3.0)
    logger.log_tabular("Epoch", 0)
    logger.log_tabular("EpRet", with_min_and_max=True)
    logger.log_tabular("Note", "hello")
    logger.log_tabular("AVeryLongDiagnosticName", 123456.789)
    capsys.readouterr()
    logger.dump_tabular()
    dashes = "-" * (22 + len("AVeryLongDiagnosticName"))
    assert capsys.readouterr().out.splitlines() == [
        dashes,
        "|                   Epoch |               0 |",
        "|            AverageEpRet |               2 |",
        "|                StdEpRet |               1 |",
        "|                MaxEpRet |               3 |",
        "|                MinEpRet |               1 |",
        "|                    Note |           hello |",
        "| AVeryLongDiagnosticName |        1.23e+05 |",
        dashes,
    ]
    logger.close()
    assert (tmp_path / "out" / "progress.txt").read_text() == (
        "Epoch\tAverageEpRet\tStdEpRet\tMaxEpRet\tMinEpRet\tNote\tAVeryLongDiagnosticName\n"
        "0\t2.0\t1.0\t3.0\t1.0\thello\t123456.789\n"
    )


def test_late_key_widens_the_file_instead_of_crashing(tmp_path):
    out = tmp_path / "out"
    logger = EpochLogger(output_dir=str(out), rltrack_config=config(tmp_path))
    vpg_style_loop(logger, epochs=5, test_from=2)
    logger.log_tabular("Epoch", 5)  # a row where a key is missing: an empty cell, as SpinningUp
    logger.dump_tabular()
    logger.close()
    df = pd.read_csv(out / "progress.txt", sep="\t")
    assert len(df) == 6
    assert list(df.columns[-4:]) == ["AverageTestEpRet", "StdTestEpRet", "MaxTestEpRet", "MinTestEpRet"]
    assert df["AverageTestEpRet"][:2].isna().all() and df["AverageTestEpRet"][2:5].notna().all()
    assert df["LossPi"][5] != df["LossPi"][5]  # NaN: not logged in the last row
    memory = logger.rltrack.backends["memory"]
    assert memory.metrics["AverageTestEpRet"] == df["AverageTestEpRet"][2:5].tolist()
    assert memory.metrics["evaluator/reward_mean"] == pytest.approx(df["AverageTestEpRet"][2:5].tolist(), rel=1e-12)
    assert memory.steps["AverageTestEpRet"] == df["TotalEnvInteracts"][2:5].astype(int).tolist()
    # header and every row have the same number of cells
    lines = (out / "progress.txt").read_text().splitlines()
    assert {line.count("\t") for line in lines} == {len(df.columns) - 1}


def test_nothing_stored_logs_nan_once_warned(tmp_path, capsys):
    logger = EpochLogger(output_dir=str(tmp_path / "out"), rltrack_config=config(tmp_path))
    logger.log_tabular("Epoch", 0)
    logger.log_tabular("TestEpRet", with_min_and_max=True)
    logger.dump_tabular()
    logger.close()
    assert "nothing was stored under 'TestEpRet'" in capsys.readouterr().err
    df = pd.read_csv(tmp_path / "out" / "progress.txt", sep="\t")
    assert df[["AverageTestEpRet", "StdTestEpRet", "MaxTestEpRet", "MinTestEpRet"]].isna().all(axis=None)


def test_log_tabular_with_a_value_clears_what_was_stored_as_spinningup(tmp_path):
    """SpinningUp's `log_tabular(key, val)` empties `epoch_dict[key]` too, so a
    value stored before it does not leak into the next epoch's statistics."""
    logger = EpochLogger(output_dir=str(tmp_path / "out"), rltrack_config=config(tmp_path))
    logger.store(Y=1)
    logger.log_tabular("Epoch", 0)
    logger.log_tabular("Y", 100)
    logger.dump_tabular()
    assert logger.epoch_dict == {"Y": [], "Epoch": []}
    logger.store(Y=2)
    assert logger.get_stats("Y") == (2.0, 0.0)
    logger.log_tabular("Epoch", 1)
    logger.log_tabular("Y", with_min_and_max=True)
    logger.dump_tabular()
    logger.close()
    df = pd.read_csv(tmp_path / "out" / "progress.txt", sep="\t")
    assert df["Y"].tolist()[0] == 100
    assert df[["AverageY", "StdY", "MaxY", "MinY"]].iloc[1].tolist() == [2.0, 0.0, 2.0, 2.0]
    assert logger.rltrack.backends["memory"].metrics["AverageY"] == [2.0]


def test_save_config_and_state_like_spinningup_and_forwarded(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    out = tmp_path / "out"
    logger = EpochLogger(output_dir=str(out), exp_name="ppo", rltrack_config=config(tmp_path))
    logger_kwargs = {"output_dir": str(out), "exp_name": "ppo"}
    config_in = {"gamma": 0.99, "hid": (64, 64), "actor_critic": torch.nn.Linear, "lam": lambda x: x, "seed": 0,
                 "logger": logger, "logger_kwargs": logger_kwargs}  # fmt: skip  # save_config(locals()) holds both
    logger.save_config(config_in)
    printed = capsys.readouterr().out
    text = (out / "config.json").read_text()
    assert text in printed
    assert text == json.dumps(convert_json(config_in) | {"exp_name": "ppo"}, separators=(",", ":\t"), indent=4, sort_keys=True)
    saved = json.loads(text)
    assert saved["actor_critic"] == "Linear" and saved["exp_name"] == "ppo" and saved["hid"] == [64, 64]
    assert " object at 0x" in next(iter(saved["logger"])) and saved["logger_kwargs"] == logger_kwargs  # SpinningUp's file keeps them

    model = torch.nn.Linear(3, 2)
    logger.setup_pytorch_saver(model)
    logger.save_state({"env": "CartPole-v1"}, None)
    logger.log_tabular("Epoch", 0)
    logger.dump_tabular()
    logger.save_state({"env": "CartPole-v1"}, itr=7)
    logger.close()
    assert sorted(os.listdir(out)) == ["config.json", "progress.txt", "pyt_save", "vars.pkl", "vars7.pkl"]
    assert sorted(os.listdir(out / "pyt_save")) == ["model.pt", "model7.pt"]
    loaded = torch.load(out / "pyt_save" / "model.pt", weights_only=False)
    assert torch.equal(loaded.weight, model.weight)
    ckpt = logger.rltrack.run_dir / "ckpt"
    assert sorted(p.name for p in ckpt.iterdir()) == ["iteration_0.pth.tar", "iteration_7.pth.tar"]
    assert torch.equal(torch.load(ckpt / "iteration_7.pth.tar", weights_only=False).weight, model.weight)
    hparams = [e.data for e in logger.rltrack.backends["memory"].events if e.kind == "hparams"]
    # the trackers get the hyperparameters: not the logger's repr, its kwargs (the per-seed output_dir) nor exp_name (the task)
    assert hparams == [{"actor_critic": "Linear", "gamma": 0.99, "hid": [64, 64], "lam": saved["lam"], "seed": 0}]
    assert json.loads((logger.rltrack.run_dir / "meta.json").read_text())["task"] == "ppo"


def test_given_rltrack_logger_is_used_and_left_open(tmp_path):
    shared = rltrack.make_logger(config(tmp_path, name="shared"))
    logger = EpochLogger(output_dir=str(tmp_path / "out"), rltrack_logger=shared)
    logger.log_tabular("Epoch", 0)
    logger.log_tabular("LossPi", 0.5)
    logger.dump_tabular()
    logger.close()
    shared.write({"after": 1.0}, step=1)
    shared.close()
    assert shared.backends["memory"].metrics["LossPi"] == [0.5]
    assert shared.backends["memory"].metrics["after"] == [1.0]


def test_default_run_name_and_root(tmp_path):
    logger = EpochLogger(exp_name="sac_cartpole", rltrack_config={"backends": {"use": ["memory"]}})
    logger.close()
    assert logger.output_dir.startswith("/tmp/experiments/")  # SpinningUp's default
    shutil.rmtree(logger.output_dir)
    assert logger.rltrack.run_dir.resolve().parent == tmp_path / "runs"  # rltrack's default root, in the cwd
    assert logger.rltrack.run_dir.name.startswith("sac_cartpole")


def test_canonical_names_mode(tmp_path):
    logger = EpochLogger(output_dir=str(tmp_path / "out"), rltrack_config=config(tmp_path, names="canonical"))
    vpg_style_loop(logger, epochs=1)
    logger.close()
    tags = set(logger.rltrack.backends["memory"].metrics)
    assert {"collector/reward_mean", "collector/reward_std", "learner/value_loss_avg"} <= tags
    assert "AverageEpRet" not in tags and "DeltaLossV" in tags  # unmapped keys stay, as written
    for native, canonical in CANONICAL.items():
        assert native.split("/")[0] == canonical.split("/")[0]


def test_rows_and_blocks_are_built_on_the_pipeline_thread(tmp_path):
    """`dump_tabular` only copies the row and the epoch's raw values and queues
    them: no event is emitted on the training thread; a column added in a
    later epoch is routed like the others."""
    shared = rltrack.make_logger(config(tmp_path, name="deferred"))

    def emit_on_calling_thread(event):
        raise AssertionError(f"emitted on the calling thread: {event}")

    shared.emit = emit_on_calling_thread
    logger = EpochLogger(output_dir=str(tmp_path / "out"), rltrack_logger=shared)
    for epoch in range(2):
        logger.store(EpRet=1.0 + epoch, EpLen=10)
        logger.store(LossPi=0.5)
        logger.log_tabular("Epoch", epoch)
        logger.log_tabular("EpRet", average_only=True)
        logger.log_tabular("LossPi", average_only=True)
        if epoch:
            logger.log_tabular("Late", 7.0)
        logger.dump_tabular()
    logger.close()
    shared.close()
    metrics = shared.backends["memory"].metrics
    assert metrics["EpRet"] == [1.0, 2.0] and metrics["collector/reward_mean"] == [1.0, 2.0]
    assert metrics["learner/policy_loss_avg"] == [0.5, 0.5] and metrics["Late"] == [7.0]
