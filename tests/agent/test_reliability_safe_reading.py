"""Reading config and run files never executes code, and nothing a user names
(run names, namespaces, keys) makes rltrack write outside the run directory.

The config files and run directories are real; the "payloads" would create a
marker file if they were ever executed, and the test checks it never appears.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import rltrack
from rltrack.cli.sync_command import SyncError, sync

HOSTILE_NAMES = ["../escaped", "../../escaped_twice", "/tmp/absolute_escape", "a\x00b", "..", ".", "sub/dir", "C:\\win\\x", "x" * 400]


def test_a_yaml_python_tag_is_refused_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    config = tmp_path / "evil.yaml"
    config.write_text(f'run: !!python/object/apply:os.system ["touch {marker}"]\n')
    with pytest.raises(rltrack.ConfigError, match=r"evil\.yaml could not be parsed.*python/object"):
        rltrack.make_logger(config)
    assert not marker.exists()


def test_toml_and_yaml_are_data_only(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    toml = tmp_path / "c.toml"
    toml.write_text(f'[run]\nroot = "{tmp_path / "runs"}"\nname = "__import__(\'os\').system(\'touch {marker}\')"\n')
    logger = rltrack.make_logger(toml)
    logger.close()
    assert not marker.exists()
    assert logger.run_dir.parent == tmp_path / "runs"


def test_total_config_is_read_as_a_literal_never_executed(tmp_path: Path) -> None:
    logger = rltrack.make_logger({"run": {"root": str(tmp_path), "name": "planted"}})
    logger.write({"x": 1.0}, step=0)
    logger.close()
    marker = tmp_path / "executed"
    (logger.run_dir / "total_config.py").write_text(f"__import__('os').system('touch {marker}') or {{}}\n")
    with pytest.raises(SyncError, match="total_config.py is not a Python literal.*--config"):
        sync(logger.run_dir, to=["mlflow"], out=io.StringIO())
    assert not marker.exists()


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_run_name_cannot_leave_the_run_root(tmp_path: Path, name: str) -> None:
    root = tmp_path / "root" / "runs"
    logger = rltrack.make_logger({"run": {"root": str(root), "name": name}})
    logger.close()
    assert logger.run_dir.parent == root
    assert len(logger.run_dir.name.encode()) <= 255 and "\x00" not in logger.run_dir.name
    assert not [p for p in (tmp_path / "root").iterdir() if p != root]


def test_namespaces_and_keys_cannot_write_outside_the_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    logger = rltrack.make_logger({"run": {"root": str(root), "name": "paths"}, "backends": {"use": ["local", "console", "tensorboard", "memory"]}})
    for i, name in enumerate(HOSTILE_NAMES):
        logger.write({name: float(i), "ok": 1.0}, step=i, namespace=name)
        logger.log_text(name, "text", step=i, namespace=name)
        logger.write({name: [1.0, 2.0]}, step=i, namespace=name, kind="histogram")
        logger.dump()
    logger.log_hparams({name: 1 for name in HOSTILE_NAMES})
    assert logger.close()
    allowed = (logger.run_dir, root / "tensorboard" / logger.run_dir.name)  # the TensorBoard backend's documented logdir
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and all(any(folder in p.parents for folder in allowed) for p in files), files
    assert not Path("/tmp/absolute_escape").exists()
    namespace_dirs = [p for p in (logger.run_dir / "log").iterdir() if p.name != "serial"]
    assert len(namespace_dirs) == len(HOSTILE_NAMES) - 1  # "." and ".." share "_"; every other name has its own
    assert len(logger.backends["memory"].events) == 3 * len(HOSTILE_NAMES) + 1
