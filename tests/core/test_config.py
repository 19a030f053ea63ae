"""Config from TOML, YAML, a dict, RLTRACK_CONFIG and RLTRACK_BACKENDS, merged
with make_logger's keyword arguments; and one test per kind of mistake, each
checking that the message names the key, the value found and the fix."""

from __future__ import annotations

import json
import re
import sys
import textwrap
import types

import pytest

import rltrack
from rltrack import ConfigError, MissingExtraError, load_config, make_logger
from rltrack.delivery.registry import backend_types
from rltrack.sinks.base import Backend
from rltrack.filters import AggregateFilter, FilterChain, SmoothingFilter, TimeFilter
from rltrack.core.optional import require

TOML = """
[run]
root = "{root}"
name = "cartpole_ppo"
tracked = ["env_id", "lr"]

[[filters]]
type = "none"

[[filters]]
type = "smoothing"
regex = "reward"
coeff = 0.9

[[filters]]
type = "aggregate"
regex = "loss"
stats = ["mean", "std", "median", "min", "max"]

[[filters]]
type = "time"
seconds = 0.5

[backends]
use = ["memory"]
"""

YAML = """
run:
  root: "{root}"
  name: cartpole_ppo
  tracked: [env_id, lr]
filters:
  - type: none
  - type: smoothing
    regex: reward
    coeff: 0.9
  - type: aggregate
    regex: loss
    stats: [mean, std, median, min, max]
  - type: time
    seconds: 0.5
backends:
  use: [memory]
"""


def as_dict(root):
    return {
        "run": {"root": root, "name": "cartpole_ppo", "tracked": ["env_id", "lr"]},
        "filters": [
            {"type": "none"},
            {"type": "smoothing", "regex": "reward", "coeff": 0.9},
            {"type": "aggregate", "regex": "loss", "stats": ["mean", "std", "median", "min", "max"]},
            {"type": "time", "seconds": 0.5},
        ],
        "backends": {"use": ["memory"]},
    }


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLTRACK_CONFIG", raising=False)
    monkeypatch.delenv("RLTRACK_BACKENDS", raising=False)


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "runs")


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def mistake(config=None, **overrides):
    """The ConfigError message for a config, after checking make_logger fails
    the same way and leaves no run directory behind."""
    with pytest.raises(ConfigError) as caught:
        load_config(config, **overrides)
    with pytest.raises(ConfigError) as again:
        make_logger(config, **overrides)
    assert str(again.value) == str(caught.value)
    return str(caught.value)


def assert_says(message, *parts):
    for part in parts:
        assert part in message, f"{part!r} not in: {message}"


# ---- loading -------------------------------------------------------------------


def test_toml_yaml_and_dict_give_the_same_config(tmp_path, root):
    from_toml = load_config(write(tmp_path, "rltrack.toml", TOML.format(root=root)))
    from_yaml = load_config(write(tmp_path, "rltrack.yaml", YAML.format(root=root)))
    from_yml = load_config(str(write(tmp_path, "rltrack.yml", YAML.format(root=root))))
    from_dict = load_config(as_dict(root))
    assert from_toml == from_yaml == from_yml == from_dict
    assert from_dict["run"] == {
        "root": root, "stores": None, "name": "cartpole_ppo", "task": None, "tracked": ["env_id", "lr"], "names": "both", "backup_code": [], "redact": [], "worker": None,
        "close_timeout": 5.0,
        "storage": None,
        "launch_runs": "per-process",
        "delivery": "agent",
    }
    assert from_dict["filters"] == as_dict(root)["filters"]
    assert from_dict["backends"] == {"use": ["memory"]}


@pytest.mark.parametrize("value", [-1, "5", True])
def test_a_bad_close_timeout_names_the_key_the_value_and_the_fix(root, value):
    with pytest.raises(ConfigError) as caught:
        load_config({"run": {"root": root, "close_timeout": value}})
    assert_says(str(caught.value), f"run.close_timeout = {value!r}", ">= 0", "e.g. close_timeout = 5")


def test_the_delivery_mode_is_gone(root):
    """One agent delivers every run: the old `delivery` switch is an unknown key."""
    with pytest.raises(ConfigError) as caught:
        load_config({"run": {"root": root}, "backends": {"use": ["local"], "delivery": "thread"}})
    assert_says(str(caught.value), "unknown key 'backends.delivery'")


def test_a_file_config_builds_its_filters_in_order(tmp_path, root):
    logger = make_logger(write(tmp_path, "rltrack.toml", TOML.format(root=root)))
    try:
        assert logger.run_dir == tmp_path / "runs" / "cartpole_ppo"
        assert list(logger.backends) == ["memory"]
        chain = logger._chain
        assert isinstance(chain, FilterChain)
        assert [type(f).__name__ for f in chain.filters] == ["NoneFilter", "SmoothingFilter", "AggregateFilter", "TimeFilter"]
        smoothing, aggregate, time_filter = chain.filters[1:]
        assert isinstance(smoothing, SmoothingFilter) and smoothing.coeff == 0.9
        assert isinstance(aggregate, AggregateFilter) and aggregate.stats == ("mean", "std", "median", "min", "max")
        assert isinstance(time_filter, TimeFilter) and time_filter.seconds == 0.5
    finally:
        logger.close(timeout=10)


def test_defaults_are_the_local_backend_under_runs():
    config = load_config()
    assert config == {
        "run": {"root": "runs", "stores": None, "name": None, "task": None, "tracked": [], "names": "both", "backup_code": [], "redact": [], "worker": None, "close_timeout": 5.0, "storage": None, "launch_runs": "per-process", "delivery": "agent"},
        "filters": [],
        "backends": {"use": ["local"]},
    }
    assert load_config() is not load_config() and load_config()["run"] is not config["run"]


def test_rltrack_config_names_the_file_used_when_none_is_given(tmp_path, root, monkeypatch):
    path = write(tmp_path, "from_env.yaml", YAML.format(root=root))
    monkeypatch.setenv("RLTRACK_CONFIG", str(path))
    assert load_config() == load_config(as_dict(root))
    logger = make_logger()
    try:
        assert logger.run_dir == tmp_path / "runs" / "cartpole_ppo"
        assert list(logger.backends) == ["memory"]
    finally:
        logger.close(timeout=10)
    # an explicit config wins over the environment's
    assert load_config({"run": {"root": root, "name": "explicit"}})["run"]["name"] == "explicit"


def test_rltrack_backends_overrides_backends_use(tmp_path, root, monkeypatch):
    monkeypatch.setenv("RLTRACK_BACKENDS", " memory , console,")
    assert load_config(as_dict(root))["backends"]["use"] == ["memory", "console"]
    assert load_config(as_dict(root), backends={"use": ["local"]})["backends"]["use"] == ["memory", "console"]
    logger = make_logger(write(tmp_path, "c.toml", TOML.format(root=root)))
    try:
        assert list(logger.backends) == ["memory", "console"]
    finally:
        logger.close(timeout=10)


def test_keyword_overrides_merge_tables_and_replace_lists(tmp_path, root):
    path = write(tmp_path, "c.toml", TOML.format(root=root))
    config = load_config(path, run={"name": "other", "tracked": ["gamma"]}, filters=[{"type": "keys", "drop": "time"}])
    assert config["run"] == {"root": root, "stores": None, "name": "other", "task": None, "tracked": ["gamma"], "names": "both", "backup_code": [], "redact": [], "worker": None, "close_timeout": 5.0, "storage": None, "launch_runs": "per-process", "delivery": "agent"}
    assert config["filters"] == [{"type": "keys", "drop": "time"}]
    assert config["backends"] == {"use": ["memory"]}
    logger = make_logger(path, run={"name": "other"}, backends={"use": ["memory", "console"]})
    try:
        assert logger.run_dir == tmp_path / "runs" / "other"
        assert list(logger.backends) == ["memory", "console"]
        assert logger.config["run"]["tracked"] == ["env_id", "lr"]
    finally:
        logger.close(timeout=10)


def test_run_root_expands_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    logger = make_logger({"run": {"root": "~/runs", "name": "h"}, "backends": {"use": ["memory"]}})
    logger.close(timeout=10)
    assert logger.run_dir == tmp_path / "home" / "runs" / "h"


def test_a_taken_run_name_gets_a_timestamp(root):
    config = {"run": {"root": root, "name": "same"}, "backends": {"use": ["memory"]}}
    first, second = make_logger(config), make_logger(config)
    first.close(timeout=10)
    second.close(timeout=10)
    assert first.run_dir.name == "same"
    assert re.fullmatch(r"same_\d{6}_\d{6}", second.run_dir.name)


def test_uppercase_extensions_are_read(tmp_path, root):
    assert load_config(write(tmp_path, "C.TOML", TOML.format(root=root))) == load_config(as_dict(root))


# ---- mistakes: where, what, how to fix -------------------------------------------


def test_unknown_section(root):
    message = mistake({"runs": {"root": root}})
    assert_says(message, "unknown key 'runs'", "allowed: run, filters, backends", "Did you mean 'run'?")


def test_unknown_section_in_keyword_overrides(root):
    message = mistake({"run": {"root": root}}, filter=[])
    assert_says(message, "make_logger() keyword arguments", "unknown key 'filter'", "Did you mean 'filters'?")


def test_unknown_key_in_run(root):
    message = mistake({"run": {"root": root, "nmae": "x"}})
    assert_says(message, "unknown key 'run.nmae'", "allowed: root, stores, name, task, tracked, names, backup_code, redact, worker", "Did you mean 'name'?")


def test_unknown_key_in_a_file_names_the_file(tmp_path):
    path = write(tmp_path, "bad.toml", '[run]\nroot = "r"\ntraked = ["lr"]\n')
    message = mistake(path)
    assert message.startswith(f"{path}: ")
    assert_says(message, "unknown key 'run.traked'", "Did you mean 'tracked'?")


def test_unknown_filter_type(root):
    message = mistake({"run": {"root": root}, "filters": [{"type": "none"}, {"type": "smooth", "regex": "r"}]})
    assert_says(message, "filters[1]", "type = 'smooth' is not a filter", "allowed: none, smoothing, aggregate, time, keys", "Did you mean 'smoothing'?")


def test_filter_without_a_type(root):
    message = mistake({"run": {"root": root}, "filters": [{"regex": "r"}]})
    assert_says(message, "filters[0]", "type = None is not a filter", "allowed: none, smoothing")


def test_unknown_filter_parameter(root):
    message = mistake({"run": {"root": root}, "filters": [{"type": "smoothing", "regex": "r", "coef": 0.9}]})
    assert_says(message, "filters[0] (type = 'smoothing')", "unknown key 'coef'", "allowed: regex, coeff, warmup", "Did you mean 'coeff'?")


def test_missing_required_filter_parameter(root):
    message = mistake({"run": {"root": root}, "filters": [{"type": "aggregate", "stats": ["mean"]}]})
    assert_says(message, "filters[0] (type = 'aggregate')", "missing required key 'regex'", "regex (required)", "stats", "every")
    message = mistake({"run": {"root": root}, "filters": [{"type": "time"}]})
    assert_says(message, "(type = 'time')", "missing required key 'seconds'")


def test_bad_regex(root):
    message = mistake({"run": {"root": root}, "filters": [{"type": "aggregate", "regex": "loss("}]})
    assert_says(message, "filters[0] (type = 'aggregate')", "regex='loss('", "not a valid regular expression", "escape special characters")
    message = mistake({"run": {"root": root}, "filters": [{"type": "keys", "drop": "*fps"}]})
    assert_says(message, "(type = 'keys')", "drop='*fps'", "not a valid regular expression")


@pytest.mark.parametrize(
    ("spec", "parts"),
    [
        ({"type": "smoothing", "regex": "r", "coeff": "high"}, ["coeff must be a number in [0, 1)", "got 'high'"]),
        ({"type": "smoothing", "regex": "r", "coeff": 1.0}, ["coeff must be a number in [0, 1)", "got 1.0"]),
        ({"type": "smoothing", "regex": "r", "warmup": "adam"}, ["warmup must be one of acme, debias", "got 'adam'"]),
        ({"type": "smoothing", "regex": 5}, ["regex must be a regular expression string", "got 5"]),
        ({"type": "aggregate", "regex": "l", "stats": ["mean", "avg"]}, ["stats must be a non-empty list drawn from mean, std, median, min, max", "got ['mean', 'avg']"]),
        ({"type": "aggregate", "regex": "l", "stats": "mean"}, ["stats must be a non-empty list", "got 'mean'"]),
        ({"type": "aggregate", "regex": "l", "every": 2.5}, ["every must be a positive integer", "got 2.5"]),
        ({"type": "aggregate", "regex": "l", "every": 0}, ["every must be a positive integer", "got 0"]),
        ({"type": "aggregate", "regex": "l", "passthrough": "no"}, ["passthrough must be true or false", "got 'no'"]),
        ({"type": "time", "seconds": "0.5"}, ["seconds must be a number >= 0", "got '0.5'"]),
        ({"type": "time", "seconds": True}, ["seconds must be a number >= 0", "got True"]),
        ({"type": "time", "seconds": -1}, ["seconds must be a number >= 0", "got -1", "use 0 to forward every record"]),
        ({"type": "keys"}, ["KeyFilter needs keep=<regex>, drop=<regex> or both"]),
    ],
)
def test_wrong_filter_parameter_types(root, spec, parts):
    message = mistake({"run": {"root": root}, "filters": [spec]})
    assert_says(message, "config: filters[0]", f"(type = {spec['type']!r})", *parts)


@pytest.mark.parametrize(
    ("run", "parts"),
    [
        ({"tracked": "lr"}, ["run.tracked = 'lr'", "must be a list of hyperparameter names", 'tracked = ["env_id", "lr"]']),
        ({"tracked": ["lr", 3]}, ["run.tracked = ['lr', 3]", "must be a list"]),
        ({"name": ""}, ["run.name = ''", "must be a non-empty string", 'name = "cartpole_ppo"']),
        ({"name": 5}, ["run.name = 5", "must be a non-empty string"]),
        ({"root": 3}, ["run.root = 3", "must be a directory path", 'root = "runs"']),
        ({"names": "all"}, ["run.names = 'all' is not allowed", "use one of both, canonical, native"]),
        ({"launch_runs": "per_process"}, ["run.launch_runs = 'per_process' is not allowed", "use one of 'per-process', 'one'", 'launch_runs = "one"']),
    ],
)
def test_wrong_run_values(root, run, parts):
    message = mistake({"run": {"root": root, **run}})
    assert_says(message, *parts)


@pytest.mark.parametrize(
    ("config", "parts"),
    [
        ({"run": "cartpole"}, ["run must be a table with keys root, stores, name, task, tracked, names, backup_code, redact, worker", "got 'cartpole'"]),
        ({"filters": {"type": "none"}}, ["filters = {'type': 'none'} must be a list of tables", "[[filters]] in TOML"]),
        ({"filters": ["none"]}, ["filters[0] must be a table with a 'type' key", "got 'none'"]),
        ({"backends": ["local"]}, ["backends must be a table with a 'use' list", "got ['local']"]),
        ({"backends": {"use": "local"}}, ["backends.use = 'local' must be a list of backend names", 'use = ["local"]']),
        ({"backends": {"use": ["memory"], "memory": 3}}, ["backends.memory must be a table of settings", "got 3"]),
        ({"backends": {"use": ["memory"], "mlfow": {}}}, ["unknown key 'backends.mlfow'", "Did you mean 'mlflow'?"]),
    ],
)
def test_wrong_section_shapes(config, parts):
    message = mistake(config)
    assert_says(message, *parts)


def test_unknown_backend_in_use(root):
    message = mistake({"run": {"root": root}, "backends": {"use": ["memory", "locl"]}})
    assert_says(message, "backends.use[1] = 'locl' is not a backend", "allowed: console, ", " local, memory, mlflow", "Did you mean 'local'?")


def test_unknown_backend_setting(root, tmp_path):
    with pytest.raises(ConfigError) as caught:
        make_logger({"run": {"root": root}, "backends": {"use": ["memory"], "memory": {"size": 3}}})
    assert_says(str(caught.value), "backends.memory", "unknown key 'size'", "allowed: (none)")
    assert not (tmp_path / "runs").exists()  # nothing was created before the error


def test_bad_name_in_rltrack_backends(root, monkeypatch):
    monkeypatch.setenv("RLTRACK_BACKENDS", "local,consol")
    message = mistake({"run": {"root": root}})
    assert_says(
        message,
        "RLTRACK_BACKENDS='local,consol'",
        "'consol' is not a backend",
        "allowed: console, ",
        " local, memory",
        "Did you mean 'console'?",
        "unset the variable",
    )


def test_rltrack_backends_with_a_malformed_backends_section(monkeypatch):
    monkeypatch.setenv("RLTRACK_BACKENDS", "memory")
    message = mistake({"backends": "memory"})
    assert_says(message, "backends must be a table", "got 'memory'")


def test_unparseable_toml_names_file_and_line(tmp_path):
    path = write(tmp_path, "bad.toml", '[run]\nroot = "runs"\nname = cartpole\n')
    message = mistake(path)
    assert_says(message, f"config file {path} could not be parsed", "line 3")


def test_unparseable_yaml_names_file_and_line(tmp_path):
    path = write(tmp_path, "bad.yaml", "run:\n  root: runs\n  tracked: [lr\n")
    message = mistake(path)
    assert_says(message, f"config file {path} could not be parsed", "line")


def test_a_yaml_file_that_is_not_a_mapping(tmp_path):
    path = write(tmp_path, "list.yaml", "- run\n- filters\n")
    message = mistake(path)
    assert_says(message, f"config file {path}", "the top level must be a table/mapping", "got list")


def test_unknown_file_extension(tmp_path):
    path = write(tmp_path, "rltrack.json", "{}")
    message = mistake(path)
    assert_says(message, str(path), "unknown extension '.json'", "use .toml, .yaml or .yml")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    message = mistake(path)
    assert_says(message, f"config file {path} does not exist", "pass an existing .toml/.yaml path, a dict, or None")


def test_rltrack_config_naming_a_missing_file(tmp_path, monkeypatch):
    monkeypatch.setenv("RLTRACK_CONFIG", str(tmp_path / "gone.yaml"))
    message = mistake()
    assert_says(message, f"RLTRACK_CONFIG='{tmp_path / 'gone.yaml'}' names no file", "unset it")


def test_rltrack_config_errors_name_the_variable(tmp_path, monkeypatch):
    path = write(tmp_path, "env.toml", "[backends]\nuse = ['nope']\n")
    monkeypatch.setenv("RLTRACK_CONFIG", str(path))
    message = mistake()
    assert_says(message, f"{path} (from RLTRACK_CONFIG)", "backends.use[0] = 'nope' is not a backend")


def test_config_of_the_wrong_type():
    message = mistake(42)
    assert_says(message, "config must be a file path, a dict or None", "got int")


# ---- missing optional packages name the extra ------------------------------------


def test_memory_df_without_pandas_names_the_extra(root, monkeypatch):
    logger = make_logger({"run": {"root": root}, "backends": {"use": ["memory"]}})
    logger.write({"x": 1.0})
    logger.close(timeout=10)
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(MissingExtraError) as caught:
        logger.backends["memory"].df
    assert_says(str(caught.value), "MemoryBackend.df needs the package 'pandas'", "pip install 'rltrack[pandas]'")
    monkeypatch.undo()
    assert list(logger.backends["memory"].df["x"]) == [1.0]


class _NeedsMissingPackage(Backend):
    name = "needy"

    def __init__(self) -> None:
        require("rltrack_no_such_package", "mlflow", "the needy backend")


def _register(monkeypatch, tmp_path, name, *, source=None, cls=None):
    """A backend name for the test: a class in an in-memory module, or a module file."""
    module_name = f"rltrack_test_backend_{name}"
    if cls is not None:
        module = types.ModuleType(module_name)
        module.Backend = cls
        monkeypatch.setitem(sys.modules, module_name, module)
    else:
        (tmp_path / f"{module_name}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(backend_types(), name, f"{module_name}:Backend")


def test_backend_whose_package_is_missing_names_the_extra_at_construction(root, tmp_path, monkeypatch):
    _register(monkeypatch, tmp_path, "needy", cls=_NeedsMissingPackage)
    with pytest.raises(ConfigError) as caught:
        make_logger({"run": {"root": root}, "backends": {"use": ["needy"]}})
    assert_says(str(caught.value), "backends.needy", "needs the package 'rltrack_no_such_package'", "pip install 'rltrack[mlflow]'")


def test_backend_module_requiring_a_missing_package_names_the_extra(root, tmp_path, monkeypatch):
    source = "from rltrack.core.optional import require\nrequire('rltrack_no_such_package', 'neptune', 'the neptune backend')\n"
    _register(monkeypatch, tmp_path, "needy2", source=source)
    with pytest.raises(ConfigError) as caught:
        make_logger({"run": {"root": root}, "backends": {"use": ["needy2"]}})
    assert_says(str(caught.value), "backend 'needy2'", "pip install 'rltrack[neptune]'")


def test_backend_module_importing_a_missing_package_directly(root, tmp_path, monkeypatch):
    _register(monkeypatch, tmp_path, "wandb", source="import rltrack_no_such_package\n")
    with pytest.raises(ConfigError) as caught:
        make_logger({"run": {"root": root}, "backends": {"use": ["wandb"]}})
    assert_says(str(caught.value), "backend 'wandb' could not be imported", "rltrack_no_such_package", "pip install 'rltrack[wandb]'")


def test_version_is_exposed():
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", rltrack.__version__)


def test_task_and_backup_code_reach_the_run_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src" / "agent").mkdir(parents=True)
    (tmp_path / "src" / "agent" / "ppo.py").write_text("LR = 3e-4\n")
    (tmp_path / "notes.txt").write_text("not code\n")
    with make_logger(run={"root": "runs", "name": "r", "task": "sweep_a", "backup_code": ["src/**/*.py"]}) as log:
        pass
    meta = json.loads((log.run_dir / "meta.json").read_text())
    assert meta["task"] == "sweep_a"
    assert (log.run_dir / "code" / "src" / "agent" / "ppo.py").read_text() == "LR = 3e-4\n"
    assert not (log.run_dir / "code" / "notes.txt").exists()


@pytest.mark.parametrize("run, bad", [({"task": ""}, "run.task"), ({"backup_code": "src/*.py"}, "run.backup_code")])
def test_bad_task_or_backup_code_names_the_key(tmp_path, run, bad):
    with pytest.raises(ConfigError, match=bad.replace(".", r"\.")):
        load_config({"run": {"root": str(tmp_path), **run}})


@pytest.mark.parametrize(
    "backend, settings, parts",
    [
        ("mlflow", {"tracking_uri": "localhost:5000"}, ["tracking_uri = 'localhost:5000'", "unknown scheme 'localhost'", "http://127.0.0.1:5000"]),
        ("mlflow", {"tracking_uri": "htp://127.0.0.1:5000"}, ["unknown scheme 'htp'"]),
        ("mlflow", {"tracking_uri": "sqlite:/runs/mlflow.db"}, ["is not a database URI", "'sqlite://'"]),
        ("mlflow", {"tracking_uri": "http:///path"}, ["names no server"]),
        ("wandb", {"mode": "online"}, ['mode = "online" needs a W&B API key', "WANDB_API_KEY", "wandb login"]),
        ("neptune", {"mode": "async", "project": "w/p"}, ['mode = "async" needs NEPTUNE_API_TOKEN']),
        ("neptune", {"mode": "sync"}, ["NEPTUNE_API_TOKEN"]),
    ],
)
def test_tracker_settings_that_cannot_work_are_refused_at_make_logger(root, tmp_path, monkeypatch, backend, settings, parts):
    """Found by a local look (no network), before training starts: before,
    nothing was said until close, and the agent retried for 5 minutes (issue 27)."""
    pytest.importorskip(backend)
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "NEPTUNE_API_TOKEN", "NEPTUNE_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no wandb settings file
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.delenv("NETRC", raising=False)
    with pytest.raises(ConfigError) as caught:
        make_logger({"run": {"root": root}, "backends": {"use": [backend], backend: settings}})
    assert_says(str(caught.value), f"backends.{backend}", *parts)
    assert not (tmp_path / "runs").exists()  # nothing was created before the error


def test_a_wandb_key_in_netrc_or_the_environment_is_enough(root, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from rltrack.delivery.construct import backend_type

    def check_online() -> None:  # the training process's check, by the class method
        backend_type("wandb", {"mode": "online"}, "config")

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    (tmp_path / ".netrc").chmod(0o600)
    check_online()
    (tmp_path / ".netrc").unlink()
    with pytest.raises(ValueError, match="needs a W&B API key"):
        check_online()
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    check_online()
