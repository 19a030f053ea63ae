"""The comparison page to explore, `rltrack compare --html`, checked in Debian's headless Chromium.

Runs of two algorithms (one named by HTML that would run if it were not escaped,
a metric key with markup too), three seeds each on their own env-step grids, are
compared into one page. Read as text, it has no URL, no image, the hostile names
only escaped. Opened in Chromium it loads without a script error, and a checking
script added by this test to a copy of the page moves the smoothing slider,
switches the x axis, shows each run, hides a group from the legend, hovers and
zooms, and writes what the charts drew before and after into the DOM, which
`--dump-dom` returns.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import rltrack
from browser import chromium, console_lines
from rltrack.cli.entry import main

HOSTILE_ALGO = "<img src=x onerror=alert(1)>"
HOSTILE_KEY = 'a<b>&"c'
METRIC = "collector/reward_mean"

#: Added to a copy of the page by the test only: it drives the page as a user would and writes what it saw into the DOM.
CHECKER = """<script>
window.addEventListener("error", (e) => console.log("rltrack-error " + e.message));
window.addEventListener("load", () => {
  const chart = document.querySelector("#rltrack-panels .chart"), svg = chart.querySelector("svg");
  const means = () => Array.from(chart.querySelectorAll("path.mean"), (p) => p.getAttribute("d"));
  const xlabel = () => chart.querySelector(".xlabel").textContent;
  const ticks = () => Array.from(svg.querySelectorAll("text.tick"), (t) => t.textContent).join(" ");
  const out = { ready: document.body.dataset.rltrackReady, images: document.images.length, before: means(), xlabel: xlabel() };
  const slider = document.getElementById("rltrack-smooth");
  slider.value = "0.9"; slider.dispatchEvent(new Event("input"));
  out.smoothed = means();
  slider.value = "0"; slider.dispatchEvent(new Event("input"));
  out.unsmoothed = means();
  const axis = document.getElementById("rltrack-axis");
  out.axes = Array.from(axis.options, (o) => o.value);
  axis.value = "train_iter"; axis.dispatchEvent(new Event("change"));
  out.byIter = means(); out.xlabelIter = xlabel();
  const seeds = document.getElementById("rltrack-seeds");
  seeds.checked = true; seeds.dispatchEvent(new Event("change"));
  out.seedLines = chart.querySelectorAll("path.seed").length;
  out.legend = Array.from(chart.querySelectorAll(".legend .item"), (b) => b.textContent);
  chart.querySelector(".legend .item").click();
  out.meansHidden = chart.querySelectorAll("path.mean").length;
  chart.querySelector(".legend .item").click();
  const box = svg.getBoundingClientRect();
  svg.dispatchEvent(new MouseEvent("mousemove", { clientX: box.left + 400, clientY: box.top + 100, bubbles: true }));
  out.tip = chart.querySelector(".tip").hidden ? null : chart.querySelector(".tip").textContent;
  out.ticks = ticks();
  svg.dispatchEvent(new WheelEvent("wheel", { deltaY: -300, clientX: box.left + 400, clientY: box.top + 100, bubbles: true, cancelable: true }));
  out.zoomedTicks = ticks();
  out.intervalCharts = document.querySelectorAll("#rltrack-stats svg.intervals").length;
  out.statsCurves = Array.from(document.querySelectorAll("#rltrack-stats .chart:not(.small) svg"), (s) => s.querySelectorAll("path.mean").length);
  document.body.dataset.check = JSON.stringify(out);
  console.log("rltrack-check done");
});
</script></body>"""


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("page_runs")
    rng = np.random.default_rng(12)
    for algo, level in (("ppo", 60.0), (HOSTILE_ALGO, 90.0)):
        for seed in range(3):
            config = {"run": {"root": str(root), "name": f"{'ppo' if algo == 'ppo' else 'other'}_s{seed}", "task": "page"}, "backends": {"use": ["local"]}}
            with rltrack.make_logger(config) as logger:
                logger.log_hparams({"algo": algo, "seed": seed})
                for i in range(30):
                    value = level * (1 - np.exp(-i / 8)) + float(rng.normal(scale=6))
                    logger.write({"reward_mean": value, HOSTILE_KEY: float(i)}, step={"env_steps": i * (100 + 20 * seed), "train_iter": i}, namespace="collector")
                    logger.dump()
    out = tmp_path_factory.mktemp("page") / "compare.html"
    assert main(["compare", "--root", str(root), "--metric", METRIC, "--group-by", "algo", "--reps", "500", "--html", str(out)]) == 0
    return out, out.read_text(encoding="utf-8")


def test_the_page_is_one_file_with_everything_from_the_runs_escaped(page):
    _, text = page
    assert "<img" not in text and "<b>" not in text  # the hostile names only as &lt;...&gt; (tables) or \\u003c...\\u003e (data)
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert not re.findall(r"""(?:src|href)=["'](?!data:)""", text) and "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    assert re.findall(r"<script[^>]*>", text) == ['<script type="application/json" id="rltrack-data">', "<script>"]
    block = re.search(r'<script type="application/json" id="rltrack-data">(.*?)</script>', text, re.S)
    data = json.loads(block[1])
    assert [group["label"] for group in data["panels"][0]["groups"]] == [f"algo={HOSTILE_ALGO}", "algo=ppo"]
    assert data["stats"]["groups"] == [f"algo={HOSTILE_ALGO}", "algo=ppo"]


def test_chromium_draws_the_page_and_its_controls_change_what_is_drawn(page, tmp_path):
    path, text = page
    done = chromium(tmp_path, path, f"--screenshot={tmp_path / 'shot.png'}")
    assert console_lines(done.stderr) == []  # no script error, nothing logged
    assert np.asarray(Image.open(tmp_path / "shot.png").convert("L")).std() > 10

    checked = tmp_path / "checked.html"
    checked.write_text(text.replace("</body>", CHECKER), encoding="utf-8")
    done = chromium(tmp_path, checked, "--dump-dom", "--virtual-time-budget=10000")
    assert [line.split('"')[1] for line in console_lines(done.stderr)] == ["rltrack-check done"], console_lines(done.stderr)
    found = re.search(r'data-check="([^"]*)"', done.stdout)
    assert found is not None, done.stdout[:1000]
    seen = json.loads(html.unescape(found[1]))
    assert seen["ready"] == "1" and seen["images"] == 0
    assert len(seen["before"]) == 2 and all(seen["before"])  # one mean per group
    assert seen["smoothed"] != seen["before"] and seen["unsmoothed"] == seen["before"]  # the slider changes the curves, and back
    assert seen["xlabel"] == "env_steps (environment steps)" and seen["xlabelIter"] == "train_iter (training iterations)"
    assert {"env_steps", "train_iter", "time"} <= set(seen["axes"]) and seen["byIter"] != seen["before"]
    assert seen["seedLines"] == 6
    assert seen["legend"] == [f"algo={HOSTILE_ALGO} (n=3)", "algo=ppo (n=3)"]  # shown as text, never run
    assert seen["meansHidden"] == 1
    assert seen["tip"] is not None and "algo=ppo" in seen["tip"] and "[" in seen["tip"]
    assert seen["zoomedTicks"] != seen["ticks"]
    assert seen["intervalCharts"] == 5  # IQM, median, mean, optimality gap, probability of improvement
    assert seen["statsCurves"] == [2, 2]  # performance profiles and sample-efficiency curves, a line per group


def test_a_long_run_is_drawn_from_a_thousand_of_its_values_first_and_last_kept(tmp_path):
    from rltrack.runs import load
    from rltrack.runs.explore import MAX_RUN_POINTS, run_points

    config = {"run": {"root": str(tmp_path), "name": "long", "task": "long"}, "backends": {"use": ["local"]}}
    with rltrack.make_logger(config) as logger:
        for i in range(2500):
            logger.write({"reward_mean": i / 7}, step={"env_steps": 8 * i}, namespace="collector")
            logger.dump()
    points = run_points(load(logger.run_dir), METRIC)
    assert len(points["y"]) == MAX_RUN_POINTS == 1000
    steps = points["x"]["env_steps"]
    assert steps[0] == 0 and steps[-1] == 8 * 2499 and steps == sorted(steps)
    assert points["y"][-1] == float(f"{2499 / 7:.6g}") and all(y == float(f"{s / 8 / 7:.6g}") for s, y in zip(steps, points["y"]))
