"""`rltrack runs ls/show/rm/archive/index` and `rltrack export`, through `rltrack.cli.entry.main`,
on a root of real runs (tests/helpers/runs_fixture.py); outputs are read back from
stdout (--json), the directories and the files written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("stable_baselines3")
pytest.importorskip("tensorboardX")

import rltrack.runs as runs  # noqa: E402
from rltrack.cli.entry import main  # noqa: E402
from rltrack.cli.runs_command import inside_root  # noqa: E402
from runs_fixture import MadeRun, runs_root_copy  # noqa: E402


@pytest.fixture
def root(tmp_path_factory, tmp_path) -> tuple[Path, list[MadeRun]]:
    target = tmp_path / "root"
    return target, runs_root_copy(tmp_path_factory, target)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ls_json(capsys, root: Path, *options: str) -> list[dict]:
    code, out, _ = run_cli(capsys, "runs", "ls", "--root", str(root), "--json", *options)
    assert code == 0
    assert out.strip().startswith("["), repr(out[:500])
    return json.loads(out)


@pytest.mark.parametrize(
    "argv",
    [["runs"], ["runs", "ls"], ["runs", "show"], ["runs", "rm"], ["runs", "archive"], ["runs", "index"], ["export"]],
)
def test_every_command_has_help(capsys, argv) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    assert f"usage: rltrack {' '.join(argv)}" in capsys.readouterr().out


def test_ls_where_sort_and_table(root, capsys) -> None:
    path, made = root
    found = ls_json(capsys, path, "--where", "lr<0.01 and env_id=='CartPole-v1'", "--sort", "-lr")
    expected = sorted((m for m in made if m.hparams.get("lr", 1) < 0.01 and m.hparams.get("env_id") == "CartPole-v1"), key=lambda m: -m.hparams["lr"])
    assert [r["path"] for r in found] == [str(m.path) for m in expected] and found
    code, out, _ = run_cli(capsys, "runs", "ls", "--root", str(path), "--columns", "lr,source")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["id", "lr", "source"] and len(lines) == 2 + len(made)
    code, _, err = run_cli(capsys, "runs", "ls", "--root", str(path), "--where", "lr <")
    assert code == 2 and "not an expression" in err


def test_rm_dry_run_then_yes(root, capsys) -> None:
    path, made = root
    doomed = [m for m in made if m.hparams.get("env_id") in ("Pendulum-v1", "HalfCheetah-v4")]
    ids = {r["id"]: r["path"] for r in ls_json(capsys, path)}
    pattern = "^(pendulum|halfcheetah)/"
    code, out, _ = run_cli(capsys, "runs", "rm", pattern, "--root", str(path))
    assert code == 0 and sorted(line.split("(")[-1].rstrip(")") for line in out.splitlines()) == sorted(str(m.path) for m in doomed)
    assert all((path / m.path).is_dir() for m in made)  # a dry run touches nothing
    code, out, _ = run_cli(capsys, "runs", "rm", pattern, "--root", str(path), "--yes", "--json")
    result = json.loads(out)
    assert code == 0 and not result["dry_run"] and sorted(r["path"] for r in result["runs"]) == sorted(str(m.path) for m in doomed)
    assert {str(m.path) for m in made if (path / m.path).is_dir()} == {str(m.path) for m in made} - {str(m.path) for m in doomed}
    assert sorted(r["path"] for r in ls_json(capsys, path)) == sorted(p for i, p in ids.items() if not i.startswith(("pendulum/", "halfcheetah/")))


def test_archive_moves_into_root_archive_and_keeps_it_indexed(root, capsys) -> None:
    path, made = root
    [plain] = [m for m in made if m.name == "plain"]
    run_id = runs.load(path / plain.path).id
    code, out, _ = run_cli(capsys, "runs", "archive", "lr=0\\.02", "--root", str(path))
    assert code == 0 and out.startswith("would be archived: ") and (path / plain.path).is_dir()
    code, out, _ = run_cli(capsys, "runs", "archive", "lr=0\\.02", "--root", str(path), "--yes")
    assert code == 0 and out.startswith("archived: ")
    assert not (path / plain.path).exists() and (path / "archive" / plain.path / "meta.json").is_file()
    assert run_id not in {r["id"] for r in ls_json(capsys, path)}  # hidden from ls ...
    [row] = [r for r in ls_json(capsys, path, "--all") if r["id"] == run_id]  # ... but still indexed
    assert row["archived"] == 1 and row["path"] == f"archive/{plain.path}"
    runs.rebuild(path)  # the flag comes from where the run lies, so a rebuild keeps it
    [row] = [r for r in ls_json(capsys, path, "--all") if r["id"] == run_id]
    assert row["archived"] == 1


def test_rm_never_leaves_the_root(root, tmp_path, capsys) -> None:
    path, made = root
    outside = tmp_path / "outside_run"
    (path / made[0].path).rename(outside)
    os.symlink(outside, path / "linked_run", target_is_directory=True)
    code, out, _ = run_cli(capsys, "runs", "rm", ".", "--root", str(path), "--yes", "--json")
    assert code == 0 and (outside / "meta.json").is_file()  # symlinked dirs are never walked nor removed
    assert (path / "linked_run").is_symlink()
    with pytest.raises(ValueError, match="symlink"):
        inside_root(path, "linked_run")
    with pytest.raises(ValueError, match="outside"):
        inside_root(path, "../outside_run")


def test_show_reports_summary_files_and_delivery(root, capsys) -> None:
    path, made = root
    [plain] = [m for m in made if m.name == "plain"]
    run_dir = path / plain.path
    meta = json.loads((run_dir / "meta.json").read_text())
    meta["backends"] = ["local", "mlflow"]  # as if MLflow had been on and stopped halfway
    (run_dir / "meta.json").write_text(json.dumps(meta))
    journal_size = (run_dir / "journal.jsonl").stat().st_size
    (run_dir / "cursors").mkdir(exist_ok=True)
    (run_dir / "cursors" / "mlflow.json").write_text(json.dumps({"offset": 100, "delivered": 2}))
    code, out, _ = run_cli(capsys, "runs", "show", str(run_dir), "--json")
    shown = json.loads(out)
    assert code == 0
    assert shown["delivery"] == [{"tracker": "mlflow", "delivered_events": 2, "pending_bytes": journal_size - 100,
                                  "state": f"behind: run `rltrack sync {run_dir}`"}]
    assert shown["metrics"]["collector/reward_mean"]["final"] == plain.rewards[-1]
    assert shown["metrics"]["collector/reward_mean"]["best"] == max(plain.rewards)
    assert shown["checkpoints"] == ["ckpt/ckpt_best.pth.tar", "ckpt/iteration_2.pth.tar"]
    assert {"meta.json", "journal.jsonl", "total_config.py"} <= {f["file"] for f in shown["files"]}
    assert shown["hparams"] == plain.hparams
    code, out, _ = run_cli(capsys, "runs", "show", shown["id"], "--root", str(path))
    assert code == 0 and "collector/reward_mean" in out and "behind" in out


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_export_writes_the_tidy_table(root, tmp_path, capsys, file_format) -> None:
    path, made = root
    chosen = [m for m in made if m.name in ("plain", "di")]
    code, out, _ = run_cli(capsys, "export", *[str(path / m.path) for m in chosen], "--format", file_format, "-o", str(tmp_path / "out"))
    assert code == 0
    for m, written in zip(chosen, out.split()):
        table = pd.read_csv(written) if file_format == "csv" else pd.read_parquet(written)
        run = runs.load(path / m.path)
        assert set(table["run"]) == {run.id}
        key = "evaluator/reward_mean" if m.name == "di" else "collector/reward_mean"
        assert table.loc[table["key"] == key, "value"].tolist() == m.rewards
        assert len(table) == len(run.samples)


@pytest.mark.slow
def test_ls_where_over_the_full_root_with_tune(tmp_path_factory, tmp_path, capsys, ray_cluster) -> None:
    """The whole fixture: rltrack runs of every adapter, Tune's own trial dirs and the other foreign ones."""
    path = tmp_path / "root"
    made = runs_root_copy(tmp_path_factory, path, with_tune=True)
    capsys.readouterr()  # what the adapters printed while the fixture was made (SpinningUp's tables)
    found = ls_json(capsys, path, "--where", "lr<0.01 and env_id=='CartPole-v1'")
    assert sorted(r["path"] for r in found) == sorted(str(m.path) for m in made if m.hparams.get("lr", 1) < 0.01 and m.hparams.get("env_id") == "CartPole-v1")
    assert {m.writer for m in made} == {"rltrack", "sb3", "tune", "spinup", "di-engine"}
    tune_rows = {r["path"]: r for r in ls_json(capsys, path, "--where", "writer == 'tune' or source == 'rllib'")}
    for m in made:
        if m.source == "rllib":
            row = tune_rows[str(m.path)]
            assert row["status"] == "finished" and row["lr"] == m.hparams["lr"]
            assert row["collector/reward_mean"] == m.rewards[-1] and f"lr={m.hparams['lr']}" in row["id"]
    incremental = runs.index.rows(path)
    runs.rebuild(path)
    assert runs.index.rows(path) == incremental
