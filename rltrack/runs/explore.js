// The comparison page's charts (rltrack.runs.explore): hand-written SVG, no library, no network.
// Data comes from the JSON block #rltrack-data; every text from the runs is set with
// textContent / createTextNode, never parsed as HTML.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("rltrack-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const MAX_POINTS = 1000;
  const state = { smooth: 0, axis: "", seeds: false, hidden: new Set() };
  const charts = [];

  function el(tag, attrs, parent, text) {
    const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  const fmt = (v) => (v === null || v === undefined || !Number.isFinite(v) ? "-" : Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(3) : +v.toPrecision(4) + "");

  // TensorBoard's smoothing: an exponential moving average, debiased for its start.
  function smooth(y, weight) {
    if (weight <= 0) return y;
    let last = 0, n = 0;
    return y.map((v) => { last = last * weight + (1 - weight) * v; n += 1; return last / (1 - Math.pow(weight, n)); });
  }

  // A run's (x, y) on an axis: points that have it, sorted by x, the last value of a repeated x.
  function runSeries(run, axis) {
    const xs = run.x[axis] || [];
    const pairs = [];
    for (let i = 0; i < run.y.length; i++) if (xs[i] !== null && xs[i] !== undefined && Number.isFinite(run.y[i])) pairs.push([xs[i], run.y[i]]);
    pairs.sort((a, b) => a[0] - b[0]);
    const x = [], y = [];
    for (const [px, py] of pairs) { if (x.length && x[x.length - 1] === px) y[y.length - 1] = py; else { x.push(px); y.push(py); } }
    return { x, y: smooth(y, state.smooth) };
  }

  function interp(x, y, at) {
    if (at < x[0] || at > x[x.length - 1]) return NaN;
    let lo = 0, hi = x.length - 1;
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (x[mid] <= at) lo = mid; else hi = mid; }
    if (x[lo] === at || hi === lo) return y[lo];
    return y[lo] + (y[hi] - y[lo]) * (at - x[lo]) / (x[hi] - x[lo]);
  }

  // A group's mean over its runs and the 95% Student-t band, as rltrack.runs.plot.group_band computes it.
  function groupBand(members) {
    let grid = Array.from(new Set(members.flatMap((s) => s.x))).sort((a, b) => a - b);
    if (grid.length > MAX_POINTS) { const a = grid[0], b = grid[grid.length - 1]; grid = Array.from({ length: MAX_POINTS }, (_, i) => a + (b - a) * i / (MAX_POINTS - 1)); }
    const out = { x: [], y: [], lo: [], hi: [], n: [] };
    for (const at of grid) {
      const v = members.map((s) => interp(s.x, s.y, at)).filter((u) => !isNaN(u));
      if (!v.length) continue;
      const mean = v.reduce((a, b) => a + b, 0) / v.length;
      let half = NaN;
      if (v.length > 1) {
        const sd = Math.sqrt(v.reduce((a, b) => a + (b - mean) ** 2, 0) / (v.length - 1));
        half = (D.t95[Math.min(v.length - 1, D.t95.length - 1)]) * sd / Math.sqrt(v.length);
      }
      out.x.push(at); out.y.push(mean); out.lo.push(mean - half); out.hi.push(mean + half); out.n.push(v.length);
    }
    return out;
  }

  // [min, max] of the finite numbers of several arrays ([0, 1] when none), without spreading
  // them into arguments (200 runs of 1,000 points are more than a call takes).
  function extent(arrays) {
    let lo = Infinity, hi = -Infinity;
    for (const a of arrays) for (const v of a) if (Number.isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
    return lo <= hi ? [lo, hi] : [0, 1];
  }

  function ticks(a, b, count) {
    if (!(b > a)) return [a];
    const step0 = (b - a) / count, mag = Math.pow(10, Math.floor(Math.log10(step0)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= step0);
    const out = [];
    for (let t = Math.ceil(a / step) * step; t <= b + step * 1e-9; t += step) out.push(+t.toPrecision(12));
    return out;
  }

  // One line chart with bands: `source()` gives [{label, color, x, y, lo, hi, n, members: [{x, y}]}].
  class LineChart {
    constructor(parent, options) {
      this.o = Object.assign({ width: 760, height: 400, hover: true }, options);
      this.box = el("div", { class: "chart" }, parent);
      this.svg = el("svg:svg", { width: this.o.width, height: this.o.height, viewBox: `0 0 ${this.o.width} ${this.o.height}`, role: "img" }, this.box);
      this.tip = el("div", { class: "tip", hidden: "" }, this.box);
      this.legend = el("div", { class: "legend" }, this.box);
      this.m = { l: 70, r: 16, t: 12, b: 46 };
      this.zoom = null;
      this.bind();
    }
    bind() {
      const s = this.svg;
      s.addEventListener("wheel", (e) => {
        e.preventDefault();
        const [a, b] = this.xDomain, at = this.invert(e.offsetX), k = e.deltaY > 0 ? 1.25 : 0.8;
        this.zoom = [at - (at - a) * k, at + (b - at) * k]; this.draw();
      }, { passive: false });
      s.addEventListener("mousedown", (e) => { this.drag = { x: e.offsetX, domain: this.xDomain.slice() }; });
      window.addEventListener("mouseup", () => { this.drag = null; });
      s.addEventListener("mousemove", (e) => {
        if (this.drag) {
          const [a, b] = this.drag.domain, shift = (e.offsetX - this.drag.x) / (this.o.width - this.m.l - this.m.r) * (b - a);
          this.zoom = [a - shift, b - shift]; this.draw(); return;
        }
        if (this.o.hover) this.hover(e.offsetX);
      });
      s.addEventListener("mouseleave", () => { this.tip.hidden = true; if (this.cursor) this.cursor.setAttribute("visibility", "hidden"); });
      s.addEventListener("dblclick", () => { this.zoom = null; this.draw(); });
    }
    invert(px) { const [a, b] = this.xDomain; return a + (px - this.m.l) / (this.o.width - this.m.l - this.m.r) * (b - a); }
    draw() {
      const o = this.o, m = this.m, w = o.width - m.l - m.r, h = o.height - m.t - m.b;
      this.series = this.o.source();
      const shown = this.series.filter((s) => !state.hidden.has(s.label));
      const full = extent(this.series.flatMap((s) => [s.x, ...(s.members || []).map((r) => r.x)]));
      this.xDomain = this.zoom || (full[1] > full[0] ? full : [full[0] - 1, full[0] + 1]);
      const inView = (x) => x >= this.xDomain[0] && x <= this.xDomain[1];
      // y: the runs' values (or the means) in view; a band reaching beyond them is cut at the edge
      const ys = [];
      for (const s of shown) {
        const from = s.members && s.members.length ? s.members : [s];
        for (const r of from) ys.push(r.y.filter((_, i) => inView(r.x[i])));
        if (o.yFromBands) ys.push(s.lo.filter((_, i) => inView(s.x[i])), s.hi.filter((_, i) => inView(s.x[i])));
      }
      let [y0, y1] = o.yRange || extent(ys);
      const pad = (y1 - y0) * 0.05 || Math.abs(y1) * 0.05 || 1; if (!o.yRange) { y0 -= pad; y1 += pad; }
      this.yDomain = [y0, y1];
      const X = (x) => m.l + (x - this.xDomain[0]) / (this.xDomain[1] - this.xDomain[0]) * w;
      const Y = (y) => m.t + h - (Math.min(Math.max(y, y0), y1) - y0) / (y1 - y0) * h;
      this.X = X;
      const svg = this.svg; svg.replaceChildren();
      el("svg:rect", { x: m.l, y: m.t, width: w, height: h }, el("svg:clipPath", { id: o.id + "-clip" }, el("svg:defs", {}, svg)));
      for (const t of ticks(this.xDomain[0], this.xDomain[1], 6)) {
        el("svg:line", { x1: X(t), x2: X(t), y1: m.t, y2: m.t + h, class: "grid" }, svg);
        el("svg:text", { x: X(t), y: m.t + h + 16, "text-anchor": "middle", class: "tick" }, svg, fmt(t));
      }
      for (const t of ticks(y0, y1, 5)) {
        el("svg:line", { x1: m.l, x2: m.l + w, y1: Y(t), y2: Y(t), class: "grid" }, svg);
        el("svg:text", { x: m.l - 6, y: Y(t) + 4, "text-anchor": "end", class: "tick" }, svg, fmt(t));
      }
      el("svg:rect", { x: m.l, y: m.t, width: w, height: h, class: "frame" }, svg);
      el("svg:text", { x: m.l + w / 2, y: o.height - 8, "text-anchor": "middle", class: "label xlabel" }, svg, o.xlabel());
      el("svg:text", { x: 14, y: m.t + h / 2, "text-anchor": "middle", transform: `rotate(-90 14 ${m.t + h / 2})`, class: "label" }, svg, o.ylabel);
      const plot = el("svg:g", { "clip-path": `url(#${o.id}-clip)` }, svg);
      const line = (x, y) => { let d = ""; x.forEach((v, i) => { if (Number.isFinite(y[i])) d += (d ? "L" : "M") + X(v).toFixed(1) + "," + Y(y[i]).toFixed(1); }); return d; };
      for (const s of shown) {
        const idx = s.x.map((_, i) => i).filter((i) => Number.isFinite(s.lo[i]) && Number.isFinite(s.hi[i]));
        if (idx.length) {
          const d = idx.map((i, k) => (k ? "L" : "M") + X(s.x[i]).toFixed(1) + "," + Y(s.hi[i]).toFixed(1)).join("") +
            idx.slice().reverse().map((i) => "L" + X(s.x[i]).toFixed(1) + "," + Y(s.lo[i]).toFixed(1)).join("") + "Z";
          el("svg:path", { d, fill: s.color, "fill-opacity": 0.2, stroke: "none", class: "band" }, plot);
        }
        if (state.seeds && s.members) for (const r of s.members) el("svg:path", { d: line(r.x, r.y), stroke: s.color, "stroke-opacity": 0.45, "stroke-width": 0.8, fill: "none", class: "seed" }, plot);
        el("svg:path", { d: line(s.x, s.y), stroke: s.color, "stroke-width": 2, fill: "none", class: "mean", "data-group": s.label }, plot);
      }
      this.cursor = el("svg:line", { y1: m.t, y2: m.t + h, class: "cursor", visibility: "hidden" }, svg);
      this.drawLegend();
    }
    drawLegend() {
      this.legend.replaceChildren();
      for (const s of this.series) {
        const item = el("button", { type: "button", class: "item" + (state.hidden.has(s.label) ? " off" : ""), title: "click to hide or show" }, this.legend);
        el("span", { class: "swatch", style: `background:${s.color}` }, item);
        item.appendChild(document.createTextNode(s.label + (s.members ? ` (n=${s.members.length})` : "")));
        item.addEventListener("click", () => { if (state.hidden.has(s.label)) state.hidden.delete(s.label); else state.hidden.add(s.label); redraw(); });
      }
    }
    hover(px) {
      const at = this.invert(px), lines = [];
      for (const s of this.series.filter((u) => !state.hidden.has(u.label))) {
        let best = -1;
        s.x.forEach((x, i) => { if (best < 0 || Math.abs(x - at) < Math.abs(s.x[best] - at)) best = i; });
        if (best >= 0) lines.push([s.color, `${s.label}: ${fmt(s.y[best])} [${fmt(s.lo[best])}, ${fmt(s.hi[best])}]` + (s.n ? ` n=${s.n[best]}` : "") + ` at ${fmt(s.x[best])}`]);
      }
      this.cursor.setAttribute("x1", this.X(at)); this.cursor.setAttribute("x2", this.X(at)); this.cursor.setAttribute("visibility", "visible");
      this.tip.replaceChildren();
      for (const [color, text] of lines) { const row = el("div", {}, this.tip); el("span", { class: "swatch", style: `background:${color}` }, row); row.appendChild(document.createTextNode(text)); }
      this.tip.hidden = !lines.length;
      this.tip.style.left = Math.min(px + 14, this.o.width - 260) + "px";
    }
  }

  function redraw() { for (const chart of charts) chart.draw(); }

  // ---- the runs' curves ------------------------------------------------------------
  const panelsBox = document.getElementById("rltrack-panels");
  D.panels.forEach((panel, p) => {
    const box = el("div", { class: "panel" }, panelsBox);
    el("h3", { class: "panel" }, box, panel.title);
    charts.push(new LineChart(box, {
      id: "p" + p,
      ylabel: panel.ylabel,
      xlabel: () => { const a = axisOf(panel); return `${a} (${D.units[a] || "steps"})`; },
      source: () => {
        const axis = axisOf(panel);
        return panel.groups.map((g, i) => {
          const members = g.runs.map((r) => runSeries(r, axis)).filter((s) => s.x.length);
          return Object.assign({ label: g.label, color: COLORS[i % COLORS.length], members }, groupBand(members));
        });
      },
    }));
  });
  function axisOf(panel) { return panel.axes.includes(state.axis) ? state.axis : panel.primary; }

  const slider = document.getElementById("rltrack-smooth"), shownSmooth = document.getElementById("rltrack-smooth-value");
  slider.addEventListener("input", () => { state.smooth = +slider.value; shownSmooth.textContent = (+slider.value).toFixed(2); redraw(); });
  const axisChoice = document.getElementById("rltrack-axis");
  for (const axis of D.axes) el("option", { value: axis }, axisChoice, `${axis} (${D.units[axis] || "steps"})`);
  axisChoice.value = D.primary;
  state.axis = D.primary;
  axisChoice.addEventListener("change", () => { state.axis = axisChoice.value; for (const c of charts) c.zoom = null; redraw(); });
  const seeds = document.getElementById("rltrack-seeds");
  seeds.addEventListener("change", () => { state.seeds = seeds.checked; redraw(); });

  // ---- the statistics: intervals, probability of improvement, profiles, sample efficiency ----
  const S = D.stats, statsBox = document.getElementById("rltrack-stats");
  function intervalChart(parent, title, rows, range, mark) {
    const width = 360, rowH = 26, m = { l: 150, r: 14, t: 22, b: 30 }, height = m.t + m.b + rowH * rows.length, w = width - m.l - m.r;
    const svg = el("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "intervals" }, el("div", { class: "chart small" }, parent));
    const [a, b] = range[1] > range[0] ? range : [range[0] - 1, range[0] + 1];
    const X = (x) => m.l + (x - a) / (b - a) * w;
    el("svg:text", { x: m.l + w / 2, y: 14, "text-anchor": "middle", class: "label" }, svg, title);
    for (const t of ticks(a, b, 4)) { el("svg:line", { x1: X(t), x2: X(t), y1: m.t, y2: height - m.b, class: "grid" }, svg); el("svg:text", { x: X(t), y: height - m.b + 14, "text-anchor": "middle", class: "tick" }, svg, fmt(t)); }
    if (mark !== undefined) el("svg:line", { x1: X(mark), x2: X(mark), y1: m.t, y2: height - m.b, class: "cursor" }, svg);
    rows.forEach((r, i) => {
      const y = m.t + rowH * i + rowH / 2;
      el("svg:text", { x: m.l - 6, y: y + 4, "text-anchor": "end", class: "tick" }, svg, r.name);
      el("svg:rect", { x: X(r.lower), y: y - 7, width: Math.max(X(r.upper) - X(r.lower), 1), height: 14, fill: r.color, "fill-opacity": 0.35 }, svg);
      el("svg:line", { x1: X(r.value), x2: X(r.value), y1: y - 9, y2: y + 9, stroke: r.color, "stroke-width": 2.5 }, svg);
      el("svg:title", {}, svg.lastChild, `${r.name}: ${fmt(r.value)} [${fmt(r.lower)}, ${fmt(r.upper)}]`);
    });
  }
  if (S) {
    const color = (g) => COLORS[S.groups.indexOf(g) % COLORS.length];
    const row = el("div", { class: "row" }, statsBox);
    for (const name of ["iqm", "median", "mean", "optimality_gap"]) {
      const rows = S.aggregates.filter((a) => a.aggregate === name).map((a) => ({ name: a.group, value: a.value, lower: a.lower, upper: a.upper, color: color(a.group) }));
      intervalChart(row, name === "iqm" ? "IQM" : name.replace("_", " "), rows, extent([rows.map((r) => r.lower), rows.map((r) => r.upper)]));
    }
    if (S.improvement.length) {
      const rows = S.improvement.map((p) => ({ name: `P(${p.x} > ${p.y})`, value: p.value, lower: p.lower, upper: p.upper, color: color(p.x) }));
      intervalChart(el("div", { class: "row" }, statsBox), "probability of improvement", rows, [0, 1], 0.5);
    }
    const curves = (table, id, title, xlabel, ylabel, yRange) => {
      el("h3", { class: "panel" }, statsBox, title);
      charts.push(new LineChart(statsBox, { id, xlabel: () => xlabel, ylabel, yRange, yFromBands: true,
        source: () => S.groups.filter((g) => table[g]).map((g) => Object.assign({ label: g, color: color(g) }, table[g])) }));
    };
    curves(S.profiles, "profiles", "performance profiles: the fraction of runs scoring above τ", `τ (${S.normalization ? "normalized score" : "score"})`, "fraction of runs with score > τ", [0, 1]);
    curves(S.curves, "efficiency", `sample efficiency: the IQM of ${S.metric} over runs at each x`, `${S.axis} (${D.units[S.axis] || "steps"})`, `IQM of ${S.metric}`);
  }
  redraw();
  document.body.dataset.rltrackReady = "1";
})();
