"""`rltrack report RUN -o report.html`: one self-contained page, opened in a real browser.

The run is written by the real rltrack logger, with names that are HTML
(`<script>` in a hyperparameter, `&`/`<` in a metric key) to prove escaping.
The page is read back three ways: parsed with the standard library (sections,
no script, no external URL, summary values equal to the journal's), its inline
PNGs decoded with PIL, and opened in Debian's headless Chromium, which takes a
screenshot and, for a copy with a checking script added by this test, reports
the decoded size of every image and the sections it sees.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import rltrack
from browser import WINDOW, chromium, console_lines
from rltrack.journal import read_journal
from rltrack.runs import load

HOSTILE_VALUE = "<script>alert('x')</script>"
HOSTILE_KEY = 'a<b>&"c'
SECTIONS = ["overview", "hyperparameters", "config", "summary", "metrics", "timings", "checkpoints"]


class PageReader(HTMLParser):
    """Tags, attributes, text, and the table rows of each <section id=...>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.urls: list[str] = []
        self.sections: list[str] = []
        self.rows: dict[str, list[list[str]]] = {}
        self.text: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        values = dict(attrs)
        self.urls += [value or "" for name, value in attrs if name in ("src", "href")]
        if tag == "section":
            self.sections.append(values["id"] or "")
        elif tag == "tr":
            self.rows.setdefault(self.sections[-1], []).append([])
        elif tag == "td":
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[self.sections[-1]][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(run directory, report path, page text), the report made by the `rltrack report` command."""
    root = tmp_path_factory.mktemp("runs")
    rng = np.random.default_rng(3)
    config = {"run": {"root": str(root), "name": "report_run", "task": "reportcheck", "tracked": ["lr"]}}
    with rltrack.make_logger(config) as logger:
        logger.log_hparams({"lr": 0.0003, "env_id": "CartPole-v1", "note": HOSTILE_VALUE})
        for iteration in range(15):
            with logger.timer("collect"):
                reward = 10 + iteration + float(rng.normal())
            logger.write({"reward_mean": reward, HOSTILE_KEY: float(iteration % 4)}, step={"env_steps": 64 * iteration}, namespace="collector")
            with logger.timer("train"):
                logger.write({"total_loss": 2.0 / (iteration + 1) + float(rng.normal(scale=0.01))}, namespace="learner")
            logger.write({"value": float(rng.random())}, namespace="evaluator")
            logger.dump()
            if iteration % 5 == 4:
                logger.log_checkpoint({"weights": [iteration]}, iteration=iteration, metric=reward)
    out = tmp_path_factory.mktemp("report") / "report.html"
    run_id = load(logger.run_dir).id
    done = subprocess.run(
        [sys.executable, "-m", "rltrack.cli", "report", run_id, "--root", str(root), "-o", str(out)],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    return logger.run_dir, out, out.read_text(encoding="utf-8")


def read_page(text: str) -> PageReader:
    reader = PageReader()
    reader.feed(text)
    return reader


def journal_series(run_dir: Path) -> dict[str, list[float]]:
    """`namespace/key` -> the finite scalars, in journal order."""
    series: dict[str, list[float]] = {}
    for event in read_journal(run_dir):
        if event.kind == "scalars":
            for key, value in event.data.items():
                if math.isfinite(value):
                    series.setdefault(event.tag(key), []).append(value)
    return series


def test_page_has_every_section_and_nothing_external_or_executable(report):
    _, _, text = report
    page = read_page(text)
    assert page.sections == SECTIONS
    assert "script" not in page.tags
    assert page.urls and all(url.startswith("data:") for url in page.urls), page.urls
    assert "http://" not in text and "https://" not in text


def test_names_from_the_run_are_escaped(report):
    _, _, text = report
    page = read_page(text)
    assert "<script>alert" not in text and html_escaped(HOSTILE_VALUE) in text
    assert HOSTILE_VALUE in "".join(page.text)  # shown as text
    metrics = [row[0] for row in page.rows["summary"][1:]]
    assert f"collector/{HOSTILE_KEY}" in metrics


def html_escaped(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;").replace("'", "&#x27;")


def test_summary_table_equals_the_journal(report):
    run_dir, _, text = report
    rows = {row[0]: row[1:] for row in read_page(text).rows["summary"][1:]}
    series = journal_series(run_dir)
    assert set(rows) == set(series)
    for key, values in series.items():
        best = min(values) if "loss" in key else max(values)
        points, final, best_cell, mean = rows[key]
        assert int(points) == len(values)
        assert float(final) == pytest.approx(values[-1], rel=1e-5)
        assert float(best_cell) == pytest.approx(best, rel=1e-5)
        assert float(mean) == pytest.approx(sum(values) / len(values), rel=1e-5)


def test_timings_and_checkpoints_list_what_the_run_did(report):
    run_dir, _, text = report
    page = read_page(text)
    durations: dict[str, list[float]] = {}
    for event in read_journal(run_dir):
        if event.kind == "timing":
            for stage, seconds in event.data.items():
                durations.setdefault(stage, []).append(seconds)
    timing_rows = {row[0]: row[1:] for row in page.rows["timings"][1:]}
    assert set(timing_rows) == {"collect", "train"}
    for stage, values in durations.items():
        assert int(timing_rows[stage][0]) == len(values) == 15
        assert float(timing_rows[stage][1]) == pytest.approx(sum(values), rel=1e-5)
    checkpoint_rows = {row[0]: int(row[1]) for row in page.rows["checkpoints"][1:]}
    on_disk = {f"ckpt/{path.name}": path.stat().st_size for path in (run_dir / "ckpt").iterdir()}
    assert checkpoint_rows == on_disk and len(on_disk) == 4  # 3 iterations + best


def test_inline_images_are_pngs_one_per_metric_group_and_timings(report):
    _, _, text = report
    images = [decode_png(url) for url in read_page(text).urls if url.startswith("data:image/png")]
    assert len(images) == 3 + 1  # collector, evaluator, learner; stage timings
    assert all(image.format == "PNG" and min(image.size) > 100 for image in images)
    groups = re.findall(r'<h3 class="metric-group">([^<]*)</h3>', text)
    assert groups == ["collector", "evaluator", "learner"]


def decode_png(url: str) -> Image.Image:
    image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1], validate=True)))
    image.load()
    return image


#: Added to a copy of the page by the test only: what the browser decoded, written into the DOM and the console.
CHECKER = """<script>
window.addEventListener("load", () => {
  const sizes = Array.from(document.images, (img) => img.complete ? img.naturalWidth + "x" + img.naturalHeight : "broken");
  const sections = Array.from(document.querySelectorAll("section"), (s) => s.id + ":" + s.querySelector("h2").textContent);
  document.body.dataset.images = sizes.join(" ");
  document.body.dataset.sections = sections.join("|");
  console.log("rltrack-check " + sizes.length + " images");
});
</script></body>"""


def test_chromium_opens_the_page_without_errors_and_takes_a_screenshot(report, tmp_path):
    _, page, text = report
    shot = tmp_path / "report.png"
    done = chromium(tmp_path, page, f"--screenshot={shot}")
    assert console_lines(done.stderr) == []
    image = Image.open(shot)
    assert image.size == WINDOW
    pixels = np.asarray(image.convert("L"))
    assert pixels.std() > 10  # text, tables and plots, not a blank page

    checked = tmp_path / "checked.html"
    checked.write_text(text.replace("</body>", CHECKER), encoding="utf-8")
    done = chromium(tmp_path, checked, "--dump-dom", "--virtual-time-budget=5000")
    assert [line.split('"')[1] for line in console_lines(done.stderr)] == ["rltrack-check 4 images"]
    body = re.search(r'<body data-images="([^"]*)" data-sections="([^"]*)"', done.stdout)
    assert body is not None, done.stdout[:500]
    expected_sizes = [f"{w}x{h}" for w, h in (decode_png(url).size for url in read_page(text).urls if url.startswith("data:image/png"))]
    assert body[1].split(" ") == expected_sizes
    assert [entry.split(":")[0] for entry in body[2].split("|")] == SECTIONS


def test_a_directory_written_by_sb3s_own_logger_gets_a_page_too(tmp_path):
    """No rltrack, no timings, no checkpoints: the page says so instead of failing."""
    from stable_baselines3.common.logger import configure

    from rltrack.runs.report import write_report

    sb3_logger = configure(str(tmp_path / "sb3_native"), ["csv"])
    for iteration in range(1, 6):
        sb3_logger.record("rollout/ep_rew_mean", 10.0 * iteration)
        sb3_logger.record("time/total_timesteps", 128 * iteration)
        sb3_logger.dump(step=128 * iteration)
    sb3_logger.close()
    text = write_report(load(tmp_path / "sb3_native"), tmp_path / "sb3.html").read_text(encoding="utf-8")
    page = read_page(text)
    assert page.sections == SECTIONS
    rows = {row[0]: row[1:] for row in page.rows["summary"][1:]}
    assert rows["collector/reward_mean"] == rows["rollout/ep_rew_mean"] == ["5", "50", "50", "30"]
    assert "no stage timings" in text and "no checkpoints" in text
    # one chart per value: the canonical twin of SB3's key is drawn once, in the collector group
    assert re.findall(r'<h3 class="metric-group">([^<]*)</h3>', text) == ["collector"]  # time/total_timesteps is collector/total_envstep_count
    assert "Same values under another name: collector/reward_mean = rollout/ep_rew_mean" in text


def test_report_help_and_a_run_that_does_not_exist(tmp_path, capsys):
    from rltrack.cli.entry import main

    with pytest.raises(SystemExit) as help_exit:
        main(["report", "--help"])
    assert help_exit.value.code == 0 and "--output" in capsys.readouterr().out
    assert main(["report", "no/such/run", "--root", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 2
    assert "no run matches 'no/such/run'" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


# ---- several runs: the comparison page ---------------------------------------------


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Two learning rates x three seeds, logged as RLlib results (each return also
    under its canonical name), compared by `rltrack report --task`."""
    from rltrack.adapters.tune import log_result

    root = tmp_path_factory.mktemp("compare_runs")
    for lr in (0.001, 0.01):
        for seed in range(3):
            config = {"run": {"root": str(root), "name": f"lr{lr}_s{seed}", "task": "cmp"}}
            with rltrack.make_logger(config) as logger:
                for i in range(1, 9):
                    log_result(logger, {"training_iteration": i, "config": {"lr": lr, "seed": seed, "output_dir": f"/out/{seed}"},
                                        "env_runners": {"episode_return_mean": lr * 1000 * i + seed, "num_env_steps_sampled_lifetime": 500 * i},
                                        "learners": {"default_policy": {"total_loss": 1.0 / i + seed / 10}}})  # fmt: skip
    out = tmp_path_factory.mktemp("compare") / "compare.html"
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "report", "--task", "cmp", "--root", str(root), "-o", str(out)],
                          check=False, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out, out.read_text(encoding="utf-8"), root


def test_the_comparison_page_has_the_groups_their_sizes_and_one_panel_per_value(comparison):
    _, text, _ = comparison
    page = read_page(text)
    assert page.sections == ["groups", "summary", "runs", "curves", "statistics"]
    groups = page.rows["groups"][1:]
    assert [(row[0], row[2]) for row in groups] == [("lr=0.001", "3"), ("lr=0.01", "3")]  # seeds and output_dir are no groups
    summary = {row[0]: row[1:] for row in page.rows["summary"][1:]}
    assert summary["lr=0.001"][0] == "3" and summary["lr=0.001"][1] == "9 ± 1 (n=3)"  # final return 8 + seed: mean 9, std 1
    assert summary["lr=0.01"][1] == "81 ± 1 (n=3)"
    runs = page.rows["runs"][1:]  # a row per run: id, group, seed, status, the main metrics' finals
    assert sorted((row[1], row[2], row[4]) for row in runs) == [(f"lr={lr}", str(seed), f"{lr * 8000 + seed:g}") for lr in (0.001, 0.01) for seed in range(3)]
    panels = [panel["title"] for panel in page_data(text)["panels"]]  # drawn by the page's script (tests/runs/test_compare_page.py)
    assert "collector/reward_mean (= env_runners/episode_return_mean)" in panels
    assert not [p for p in panels if p.startswith("env_runners/episode_return_mean")]  # not twice under two names
    assert len(panels) == len(set(panels))
    assert re.findall(r"<script[^>]*>", text) == ['<script type="application/json" id="rltrack-data">', "<script>"]
    assert "http" not in " ".join(page.urls) and not [url for url in page.urls if not url.startswith("data:")]


def page_data(text: str) -> dict:
    """The JSON block the comparison page's charts are drawn from."""
    block = re.search(r'<script type="application/json" id="rltrack-data">(.*?)</script>', text, re.S)
    assert block is not None
    return json.loads(block[1])


def test_the_charts_name_their_axes_with_units(tmp_path):
    from rltrack.runs.report import primary_axis, value_panels, value_unit

    with rltrack.make_logger({"run": {"root": str(tmp_path), "name": "axes", "task": "axes"}}) as logger:
        logger.write({"reward_mean": 1.0}, step={"env_steps": 10, "train_iter": 1}, namespace="collector")
        logger.write({"collect_time": 0.5}, step={"env_steps": 10, "train_iter": 1}, namespace="collector")
    run = load(logger.run_dir)
    assert [metric for metric, _ in value_panels([run])] == ["collector/reward_mean", "collector/collect_time"]
    assert primary_axis([run], "collector/reward_mean") == "env_steps"
    assert value_unit("collector/collect_time") == "collector/collect_time (s)" and value_unit("collector/reward_mean") == "collector/reward_mean"
    assert value_unit("collector/avg_envstep_per_sec") == "collector/avg_envstep_per_sec (1/s)"  # a rate, not a duration
    assert value_unit("time/fps") == "time/fps (1/s)"
    assert value_unit("collector/total_envstep_count") == "collector/total_envstep_count (environment steps)"
    assert value_unit("collector/total_episode_count") == "collector/total_episode_count (episodes)"


def test_each_panel_holds_every_runs_values_on_each_of_its_axes(comparison):
    _, text, _ = comparison
    reward = next(panel for panel in page_data(text)["panels"] if panel["metric"] == "collector/reward_mean")
    assert [group["label"] for group in reward["groups"]] == ["lr=0.001", "lr=0.01"]
    finals = sorted(run["y"][-1] for group in reward["groups"] for run in group["runs"])
    assert finals == [8000 * lr + seed for lr in (0.001, 0.01) for seed in range(3)]
    first = reward["groups"][0]["runs"][0]
    assert first["x"]["env_steps"] == [500 * i for i in range(1, 9)] and first["x"]["train_iter"] == list(range(1, 9))
    assert reward["primary"] == "env_steps" and {"env_steps", "train_iter", "time"} <= set(reward["axes"])


def test_chromium_shows_the_comparison_page(comparison, tmp_path):
    page, _, _ = comparison
    shot = tmp_path / "compare.png"
    done = chromium(tmp_path, page, f"--screenshot={shot}")
    assert console_lines(done.stderr) == []
    pixels = np.asarray(Image.open(shot).convert("L"))
    assert pixels.std() > 10


def test_values_that_happen_to_be_equal_keep_their_own_panels(tmp_path):
    """In CartPole the return equals the episode length (reward 1 per step), so
    SB3's `ep_rew_mean` and `ep_len_mean` are equal series: still two values.
    Only names of one value (a native key and its canonical name) share a
    panel, and the return stays in the summary under its canonical name."""
    from stable_baselines3.common.logger import configure

    from rltrack.adapters.sb3 import add_writer
    from rltrack.runs.compare import render_comparison

    runs = []
    for seed in (0, 1):
        sb3_logger = configure(str(tmp_path / f"sb3_{seed}"), [])
        with rltrack.make_logger({"run": {"root": str(tmp_path / "root"), "name": f"cartpole_s{seed}", "task": "cartpole"}}) as logger:
            add_writer(sb3_logger, logger)
            for iteration in range(1, 6):
                episode = 20.0 * iteration + seed
                sb3_logger.record("rollout/ep_rew_mean", episode)
                sb3_logger.record("rollout/ep_len_mean", episode)
                sb3_logger.record("time/total_timesteps", 512 * iteration)
                sb3_logger.dump(step=512 * iteration)
        runs.append(load(logger.run_dir))
    text = render_comparison(runs, "cartpole")
    panels = [panel["title"] for panel in page_data(text)["panels"]]
    assert "collector/reward_mean (= rollout/ep_rew_mean)" in panels
    assert "collector/avg_envstep_per_episode (= rollout/ep_len_mean)" in panels
    assert len(panels) == len(set(panels))
    assert "collector/reward_mean: final" in re.findall(r"<th>([^<]*)</th>", text)
