"""The leaderboard page template: one HTML file with inline CSS and JavaScript.

``__TITLE__`` and ``__DATA__`` (the JSON from :func:`~agentgym.benchmarks.leaderboard.
page_data`) are substituted. The script builds every table and plot from that JSON, so
the page needs no server and loads nothing from anywhere else.
"""

from __future__ import annotations

PAGE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
  :root { --fg:#1d2330; --muted:#5c6577; --line:#d9dde5; --accent:#2f6fdb; --front:#d9480f;
          --bg:#ffffff; --zebra:#f6f8fb; }
  * { box-sizing: border-box; }
  body { font-family: system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
         color: var(--fg); background: var(--bg); margin: 0; padding: 24px 32px 48px; }
  h1 { font-size: 1.6rem; margin: 0 0 4px; }
  h2 { font-size: 1.25rem; margin: 36px 0 4px; }
  .meta, .note { color: var(--muted); font-size: .9rem; margin: 2px 0 12px; }
  code { background: #eef1f6; padding: 1px 4px; border-radius: 3px; }
  .table-wrap { overflow-x: auto; max-width: 100%; }
  table.leaderboard { border-collapse: collapse; font-size: .92rem; margin: 8px 0 16px; }
  table.leaderboard th, table.leaderboard td { padding: 6px 10px; border-bottom: 1px solid var(--line);
         text-align: right; white-space: nowrap; }
  table.leaderboard th.text, table.leaderboard td.text { text-align: left; }
  table.leaderboard thead th { background: #eef2f8; cursor: pointer; user-select: none; }
  table.leaderboard thead th:hover { background: #e0e7f3; }
  table.leaderboard tbody tr:nth-child(even) { background: var(--zebra); }
  table.leaderboard td .ci { display: block; color: var(--muted); font-size: .75rem; }
  .arrow { color: var(--accent); margin-left: 4px; }
  .tag { font-size: .72rem; border-radius: 3px; padding: 0 4px; margin-left: 6px; }
  .tag.partial { background: #fff3bf; color: #7a5b00; }
  .tag.unisolated { background: #ffe3e3; color: #a61e1e; }
  .tag.front { background: #ffe8dc; color: var(--front); }
  svg.pareto { background: #fbfcfe; border: 1px solid var(--line); border-radius: 6px; }
  svg.pareto .axis line, svg.pareto .axis path { stroke: #9aa3b2; }
  svg.pareto .grid line { stroke: #e6e9ef; }
  svg.pareto text { font-size: 11px; fill: var(--muted); }
  svg.pareto text.point-label { fill: var(--fg); font-size: 11px; }
  svg.pareto text.axis-title { font-size: 12px; fill: var(--fg); }
  svg.pareto circle.point { fill: var(--accent); fill-opacity: .85; stroke: #fff; stroke-width: 1.5; }
  svg.pareto circle.point.on-front { fill: var(--front); }
  svg.pareto polyline.pareto-line { fill: none; stroke: var(--front); stroke-width: 1.5;
         stroke-dasharray: 5 4; }
  footer { margin-top: 40px; color: var(--muted); font-size: .8rem; }
</style>
</head>
<body>
<h1>agentgym leaderboard</h1>
<p class="meta" id="generated"></p>
<noscript><p>This page draws its tables with JavaScript; see leaderboard.md next to it
for the same numbers as plain text.</p></noscript>
<main id="suites"></main>
<footer>Brackets: 95% percentile-bootstrap interval over tasks. Click a column header to
sort; <code>#sort=METRIC</code> or <code>#sort=METRIC:asc</code> in the address sorts on
load. Results of different suite hashes are never ranked together.</footer>
<script type="application/json" id="leaderboard-data">__DATA__</script>
<script>
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("leaderboard-data").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";

  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    for (var k in (attrs || {})) { e.setAttribute(k, attrs[k]); }
    (kids || []).forEach(function (c) {
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in (attrs || {})) { e.setAttribute(k, attrs[k]); }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function num(cell) { return cell && cell.value !== null && cell.value !== undefined ? cell.value : null; }
  function fmt(metric, v) {
    if (v === null || v === undefined) { return "\u2013"; }
    return metric === "mean_tokens" ? v.toFixed(1) : v.toFixed(3);
  }
  function short(s, n) { return s.length > n ? s.slice(0, n - 1) + "\u2026" : s; }
  function parseSort() {
    var m = /(?:^#|&)sort=([A-Za-z_@0-9]+)(?::(asc|desc))?/.exec(window.location.hash || "");
    return m ? { key: m[1], dir: m[2] || null } : null;
  }

  function columns(suite) {
    var cols = [{ key: "rank", label: "rank", text: false },
                { key: "label", label: "policy", text: true }];
    suite.metrics.forEach(function (m) {
      cols.push({ key: m, label: suite.labels[m] || m, metric: true });
    });
    cols.push({ key: "episodes", label: "episodes", text: false });
    return cols;
  }
  function defaultDir(suite, key) {
    if (key === "rank" || key === "label") { return "asc"; }
    return suite.lower_is_better.indexOf(key) >= 0 ? "asc" : "desc";
  }
  function sortValue(row, key) {
    if (key === "rank") { return row.rank; }
    if (key === "label") { return row.label.toLowerCase(); }
    if (key === "episodes") { return row.episodes; }
    return num(row.metrics[key]);
  }

  function renderTable(suite, table, state) {
    var cols = columns(suite);
    var thead = table.tHead || table.createTHead();
    thead.innerHTML = "";
    var hr = thead.insertRow();
    cols.forEach(function (c) {
      var th = el("th", { "class": c.text ? "text" : "", "data-key": c.key, scope: "col" }, [c.label]);
      if (state.key === c.key) {
        th.setAttribute("aria-sort", state.dir === "asc" ? "ascending" : "descending");
        th.appendChild(el("span", { "class": "arrow" }, [state.dir === "asc" ? "\u25B2" : "\u25BC"]));
      }
      th.addEventListener("click", function () {
        var dir = state.key === c.key ? (state.dir === "asc" ? "desc" : "asc") : defaultDir(suite, c.key);
        state.key = c.key; state.dir = dir;
        renderTable(suite, table, state);
      });
      hr.appendChild(th);
    });
    var rows = suite.rows.slice();
    rows.sort(function (a, b) {
      var x = sortValue(a, state.key), y = sortValue(b, state.key);
      if (x === null && y === null) { return a.rank - b.rank; }
      if (x === null) { return 1; }
      if (y === null) { return -1; }
      var c = x < y ? -1 : x > y ? 1 : 0;
      if (state.dir === "desc") { c = -c; }
      return c !== 0 ? c : a.rank - b.rank;
    });
    var old = table.tBodies[0];
    if (old) { table.removeChild(old); }
    var tbody = table.createTBody();
    rows.forEach(function (r) {
      var tr = tbody.insertRow();
      tr.setAttribute("data-policy", r.label);
      tr.setAttribute("data-rank", String(r.rank));
      cols.forEach(function (c) {
        var td = tr.insertCell();
        td.setAttribute("data-key", c.key);
        if (c.key === "rank") { td.textContent = String(r.rank); }
        else if (c.key === "label") {
          td.className = "text";
          td.title = r.spec;
          td.appendChild(document.createTextNode(r.label));
          if (!r.complete) { td.appendChild(el("span", { "class": "tag partial" }, ["partial"])); }
          if (r.unisolated) {
            td.appendChild(el("span", { "class": "tag unisolated", title: "graded without isolation (local sandbox)" },
                              ["graded without isolation"]));
          }
          if (r.pareto) { td.appendChild(el("span", { "class": "tag front", title: "on the Pareto frontier" }, ["pareto"])); }
        } else if (c.key === "episodes") { td.textContent = r.episodes + "/" + r.expected; }
        else {
          var cell = r.metrics[c.key];
          var v = num(cell);
          td.setAttribute("data-value", v === null ? "" : String(v));
          td.appendChild(document.createTextNode(fmt(c.key, v)));
          if (v !== null && cell.ci_low !== null && cell.ci_high !== null) {
            td.appendChild(el("span", { "class": "ci" },
              ["[" + fmt(c.key, cell.ci_low) + ", " + fmt(c.key, cell.ci_high) + "]"]));
          }
        }
      });
    });
  }

  function niceTicks(lo, hi, n) {
    var span = hi - lo;
    if (span <= 0) { return [lo]; }
    var step = Math.pow(10, Math.floor(Math.log10(span / n)));
    var err = (n * step) / span;
    if (err <= 0.15) { step *= 10; } else if (err <= 0.35) { step *= 5; } else if (err <= 0.75) { step *= 2; }
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) { out.push(+t.toFixed(10)); }
    return out;
  }

  function renderPlot(suite, holder) {
    var W = 760, H = 420, L = 64, R = 24, T = 52, B = 54;
    var pts = suite.rows.map(function (r) {
      return { row: r, x: num(r.metrics.mean_tokens), y: num(r.metrics[suite.plot_metric]) };
    }).filter(function (p) { return p.x !== null && p.y !== null; });
    var svg = sv("svg", { "class": "pareto", width: W, height: H, viewBox: "0 0 " + W + " " + H,
                          "data-suite": suite.name, role: "img" });
    var ylab = suite.labels[suite.plot_metric] || suite.plot_metric;
    svg.appendChild(sv("title", {}, suite.name + ": " + ylab + " versus mean tokens"));
    svg.appendChild(sv("text", { x: L, y: 24, "class": "axis-title" }, ylab + " vs mean response tokens"));
    var xs = pts.map(function (p) { return p.x; }), ys = pts.map(function (p) { return p.y; });
    var xmin = Math.min.apply(null, xs.concat([Infinity])), xmax = Math.max.apply(null, xs.concat([0]));
    var logx = pts.length > 0 && xmin > 0 && xmax / xmin > 20;
    var x0, x1, fx, xt;
    if (logx) {
      x0 = Math.pow(10, Math.floor(Math.log10(xmin))); x1 = Math.pow(10, Math.ceil(Math.log10(xmax)));
      fx = function (v) { return L + (Math.log10(v) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0)) * (W - L - R); };
      xt = [];
      for (var d = x0; d <= x1 * 1.0001; d *= 10) { xt.push(d); }
    } else {
      x0 = 0; x1 = xmax > 0 ? xmax * 1.1 : 1;
      fx = function (v) { return L + (v - x0) / (x1 - x0) * (W - L - R); };
      xt = niceTicks(x0, x1, 6);
    }
    var y0 = Math.min(0, Math.min.apply(null, ys.concat([0]))), y1 = Math.max(1, Math.max.apply(null, ys.concat([1])));
    var fy = function (v) { return H - B - (v - y0) / (y1 - y0) * (H - T - B); };
    var grid = sv("g", { "class": "grid" }), axis = sv("g", { "class": "axis" });
    niceTicks(y0, y1, 5).forEach(function (t) {
      grid.appendChild(sv("line", { x1: L, x2: W - R, y1: fy(t), y2: fy(t) }));
      axis.appendChild(sv("text", { x: L - 8, y: fy(t) + 4, "text-anchor": "end" }, t.toFixed(2)));
    });
    xt.forEach(function (t) {
      grid.appendChild(sv("line", { x1: fx(t), x2: fx(t), y1: T, y2: H - B }));
      axis.appendChild(sv("text", { x: fx(t), y: H - B + 16, "text-anchor": "middle" }, String(Math.round(t * 100) / 100)));
    });
    axis.appendChild(sv("line", { x1: L, x2: W - R, y1: H - B, y2: H - B }));
    axis.appendChild(sv("line", { x1: L, x2: L, y1: T, y2: H - B }));
    axis.appendChild(sv("text", { x: (L + W - R) / 2, y: H - 12, "text-anchor": "middle", "class": "axis-title" },
      "mean response tokens per episode" + (logx ? " (log scale)" : "")));
    axis.appendChild(sv("text", { x: 14, y: (T + H - B) / 2, "text-anchor": "middle", "class": "axis-title",
      transform: "rotate(-90 14 " + (T + H - B) / 2 + ")" }, ylab));
    svg.appendChild(grid); svg.appendChild(axis);
    var front = pts.filter(function (p) { return p.row.pareto; })
                   .sort(function (a, b) { return a.x - b.x || b.y - a.y; });
    if (front.length > 1) {
      var d = [];
      front.forEach(function (p, i) {
        if (i > 0) { d.push(fx(p.x) + "," + fy(front[i - 1].y)); }
        d.push(fx(p.x) + "," + fy(p.y));
      });
      svg.appendChild(sv("polyline", { "class": "pareto-line", points: d.join(" ") }));
    }
    var placed = [];
    pts.forEach(function (p) {
      var cx = fx(p.x), cy = fy(p.y);
      var c = sv("circle", { "class": "point" + (p.row.pareto ? " on-front" : ""), cx: cx, cy: cy, r: 6,
                             "data-policy": p.row.label, "data-x": p.x, "data-y": p.y });
      c.appendChild(sv("title", {}, p.row.label + ": " + ylab + " " + fmt(suite.plot_metric, p.y) +
                                  ", " + fmt("mean_tokens", p.x) + " tokens"));
      svg.appendChild(c);
      var ly = cy - 10;
      placed.forEach(function (q) { if (Math.abs(q.x - cx) < 120 && Math.abs(q.y - ly) < 13) { ly = q.y + 14; } });
      placed.push({ x: cx, y: ly });
      var text = short(p.row.label, 34);
      var anchor = cx + 12 + 6.5 * text.length > W - R ? "end" : "start";
      svg.appendChild(sv("text", { "class": "point-label", x: cx + (anchor === "end" ? -9 : 9), y: ly,
                                   "text-anchor": anchor }, text));
    });
    holder.appendChild(svg);
  }

  var main = document.getElementById("suites");
  document.getElementById("generated").textContent =
    "Generated " + DATA.generated + " \u00B7 " + DATA.suites.length + " suite version(s)";
  if (DATA.suites.length === 0) {
    main.appendChild(el("p", { id: "empty" }, ["No complete results found."]));
  }
  var want = parseSort();
  DATA.suites.forEach(function (suite) {
    var sec = el("section", { "class": "suite", id: "suite-" + suite.name + "-" + suite.hash.slice(0, 12),
                               "data-suite": suite.name, "data-hash": suite.hash });
    sec.appendChild(el("h2", {}, [suite.name + " (v" + suite.version + ")"]));
    sec.appendChild(el("p", { "class": "meta" }, [
      suite.description + " " + suite.num_tasks + " tasks \u00D7 " + suite.k + " samples; ranked by " +
      (suite.labels[suite.primary] || suite.primary) + ". Suite hash " + suite.hash.slice(0, 12) + "."]));
    var table = el("table", { "class": "leaderboard", "data-suite": suite.name });
    var state = { key: "rank", dir: "asc" };
    if (want && (want.key === "rank" || want.key === "label" || want.key === "episodes" ||
                 suite.metrics.indexOf(want.key) >= 0)) {
      state.key = want.key; state.dir = want.dir || defaultDir(suite, want.key);
    }
    renderTable(suite, table, state);
    sec.appendChild(el("div", { "class": "table-wrap" }, [table]));
    var holder = el("div", { "class": "plot" });
    renderPlot(suite, holder);
    sec.appendChild(holder);
    main.appendChild(sec);
  });
  document.body.setAttribute("data-rendered", "true");
})();
</script>
</body>
</html>
"""
