"""`sloth timeline --html FILE`: the timeline as one self-contained page
(inline SVG, CSS and JavaScript; nothing is fetched from anywhere), a file
a person opens or mails.

The data travels as JSON inside ``<script type="application/json">``
with every ``<``, ``>``, ``&`` and line separator escaped, so nothing in it
(a job's command holding ``</script>``, a log line holding ``<img
onerror=...>``) can end the script or be parsed as markup; the page's
script draws it with DOM calls only (``textContent``, ``setAttribute``,
never ``innerHTML``). A small collector, first in the page, lists any
script error on the page itself (``#page-errors``; the browser test reads it).

What it shows: a ruler, the machine's row (its sleeps and the daemon's
downtime, each shaded down the whole chart and labelled), one row per lane
(concurrent runs stacked) or per job; hover names the job and its times,
a click shows its history and log tail (embedded by the command, capped;
``#job=ID`` in the address opens one), zoom to an hour (the buttons, or a
click on the ruler) and pan.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from sloth_daemon.errors import SlothError


def write(data: dict[str, Any], path: Path, *, by_job: bool) -> None:
    """The page for ``data`` (the ``timeline`` op's answer, with logs) at
    ``path``, private (0600: it holds commands and their output), replaced whole."""
    from sloth_daemon.safefile import replace_file

    text = render(data, by_job=by_job)
    try:
        replace_file(path, text.encode("utf-8"), 0o600)
    except OSError as e:
        raise SlothError(f"cannot write {path}: {e.strerror or e}",
                         hint="Name a file in a folder you can write to.") from e


def render(data: dict[str, Any], *, by_job: bool) -> str:
    """The whole page as text."""
    payload = {"data": data, "byJob": by_job}
    title = "sloth timeline" + (f" · lane {data['lane']}" if data.get("lane") else "")
    return (PAGE.replace("@TITLE@", html.escape(title))
            .replace("@DATA@", script_json(payload))
            .replace("@CSS@", CSS).replace("@JS@", JS).replace("@COLLECT@", COLLECT))


def script_json(value: Any) -> str:
    """JSON safe inside a <script> element: no character of it can close the
    element or open a comment (<, >, &, and U+2028/2029 escaped)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>@TITLE@</title>
<script>@COLLECT@</script>
<style>@CSS@</style>
</head>
<body>
<header>
  <h1>@TITLE@</h1>
  <p id="summary"></p>
  <nav>
    <button id="all" type="button">whole window</button>
    <button id="hour" type="button">1 hour</button>
    <button id="back" type="button" title="an hour earlier">&#9664;</button>
    <button id="ahead" type="button" title="an hour later">&#9654;</button>
    <button id="rows" type="button"></button>
    <span id="range"></span>
  </nav>
</header>
<main>
  <div id="chart"></div>
  <p id="legend">
    <span class="key run-done"></span> ran <span class="key run-failed"></span> failed
    <span class="key run-cut"></span> cut short <span class="key run-running"></span> running
    <span class="key wait"></span> waiting <span class="key sleep"></span> asleep
    <span class="key down"></span> daemon down.
    Click a bar for its history and log; click the ruler to zoom to that hour.
  </p>
  <ul id="gaps"></ul>
  <section id="detail" hidden></section>
</main>
<div id="tip" hidden></div>
<ol id="page-errors" hidden></ol>
<script type="application/json" id="sloth-data">@DATA@</script>
<script>@JS@</script>
</body>
</html>
"""

# First in the page: any error of the page's script is listed on the page
# (and counted on <html data-errors>), for a person and for the browser test.
COLLECT = """
(function () {
  function note(text) {
    var n = Number(document.documentElement.getAttribute('data-errors') || 0) + 1;
    document.documentElement.setAttribute('data-errors', String(n));
    function add() {
      var list = document.getElementById('page-errors');
      if (!list) { return setTimeout(add, 0); }
      var li = document.createElement('li');
      li.textContent = String(text);
      list.appendChild(li);
      list.hidden = false;
    }
    add();
  }
  window.addEventListener('error', function (e) { note('error: ' + (e.message || e.type)); });
  window.addEventListener('unhandledrejection', function (e) { note('rejection: ' + e.reason); });
  var original = console.error;
  console.error = function () { note('console: ' + Array.prototype.join.call(arguments, ' '));
                                return original.apply(console, arguments); };
  document.documentElement.setAttribute('data-errors', '0');
})();
"""

CSS = """
:root { --run: #2e8b57; --failed: #c0392b; --cut: #d68910; --running: #2874a6; --wait: #b3b6b7;
        --sleep: #5b6dcd; --down: #8e44ad; --fg: #1b1f23; --bg: #fff; --grid: #e5e7e9; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e6e6; --bg: #16181b; --grid: #2c3036; --wait: #5d6166; } }
body { font: 14px/1.4 system-ui, sans-serif; color: var(--fg); background: var(--bg); margin: 16px; }
h1 { font-size: 18px; margin: 0 0 4px; }
nav button { font: inherit; margin-right: 4px; }
#range { margin-left: 8px; opacity: .8; }
#chart { overflow-x: auto; margin-top: 8px; }
svg text { fill: var(--fg); font-size: 12px; }
.label { font-family: ui-monospace, monospace; }
.grid { stroke: var(--grid); }
.ruler { cursor: zoom-in; }
rect.run { cursor: pointer; }
rect.run-done, .key.run-done { fill: var(--run); background: var(--run); }
rect.run-failed, .key.run-failed { fill: var(--failed); background: var(--failed); }
rect.run-cut, .key.run-cut { fill: var(--cut); background: var(--cut); }
rect.run-running, .key.run-running { fill: var(--running); background: var(--running); }
rect.run.selected { stroke: var(--fg); stroke-width: 2px; }
path.fail-mark { stroke: var(--failed); stroke-width: 2px; fill: none; pointer-events: none; }
rect.wait, .key.wait { fill: var(--wait); background: var(--wait); opacity: .45; }
.gap.sleep rect, .key.sleep { fill: var(--sleep); background: var(--sleep); fill-opacity: .18; }
.gap.down rect, .key.down { fill: var(--down); background: var(--down); fill-opacity: .22; }
.gap text { font-size: 11px; font-weight: 600; }
.key { display: inline-block; width: 12px; height: 12px; vertical-align: middle; margin-left: 8px; }
#tip { position: fixed; pointer-events: none; background: #222; color: #fff; padding: 6px 8px;
       border-radius: 4px; white-space: pre; font-size: 12px; z-index: 2; }
#detail { border-top: 1px solid var(--grid); margin-top: 12px; }
#detail table { border-collapse: collapse; font-size: 12px; }
#detail td { padding: 1px 8px 1px 0; vertical-align: top; }
#detail pre { background: #111; color: #eee; padding: 8px; max-height: 24em; overflow: auto; }
#page-errors { color: var(--failed); }
"""

JS = r"""
(function () {
  'use strict';
  var NS = 'http://www.w3.org/2000/svg';
  var given = JSON.parse(document.getElementById('sloth-data').textContent);
  var data = given.data, byJob = given.byJob;
  var view = { t0: data.since, t1: data.until };
  var LABEL = 190, TRACK = 16, PAD = 6, RULER = 24, MACHINE = 22;
  var jobsById = {};
  data.jobs.forEach(function (j) { jobsById[j.id] = j; });

  function el(name, attrs, parent, text) {
    var e = document.createElementNS(NS, name);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, String(attrs[k])); });
    if (text !== undefined) { e.textContent = text; }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function h(name, parent, text) {
    var e = document.createElement(name);
    if (text !== undefined) { e.textContent = text; }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function pad2(n) { return (n < 10 ? '0' : '') + n; }
  function clock(t, seconds) {
    var d = new Date(t * 1000);
    var s = pad2(d.getHours()) + ':' + pad2(d.getMinutes()) + (seconds ? ':' + pad2(d.getSeconds()) : '');
    return (view.t1 - view.t0 > 86400 ? d.toDateString().slice(0, 3) + ' ' : '') + s;
  }
  function stamp(t) { var d = new Date(t * 1000); return d.toDateString() + ' ' + clock(t, true).slice(-8); }
  function duration(s) {
    s = Math.abs(s);
    if (s < 1) { return Math.round(s * 1000) + 'ms'; }
    if (s < 60) { return (s < 10 ? s.toFixed(1) : Math.round(s)) + 's'; }
    if (s < 3600) { return Math.floor(s / 60) + 'm' + (s % 60 >= 1 ? Math.floor(s % 60) + 's' : ''); }
    if (s < 86400) { return Math.floor(s / 3600) + 'h' + Math.floor((s % 3600) / 60) + 'm'; }
    return Math.floor(s / 86400) + 'd' + Math.floor((s % 86400) / 3600) + 'h';
  }
  function commandText(j) {
    var c = j.command || [];
    var t = (j.shell && c.length === 3 && c[1] === '-c') ? c[2] : c.join(' ');
    return (j.label ? '[' + j.label + '] ' : '') + t;
  }
  function cut(t, n) { return t.length > n ? t.slice(0, n - 1) + '\u2026' : t; }
  function outcomeClass(o) {
    return o === 'done' ? 'run-done' : o === 'failed' ? 'run-failed' : o === 'running' ? 'run-running' : 'run-cut';
  }
  function costText(c) {
    if (!c) { return ''; }
    var parts = [];
    if (c.cpu_s != null) { parts.push('cpu ' + duration(c.cpu_s)); }
    if (c.peak_rss_bytes != null) { parts.push('peak ' + (c.peak_rss_bytes / 1048576).toFixed(1) + ' MB'); }
    if (c.wall_s != null) { parts.push('wall ' + duration(c.wall_s)); }
    if (c.covers) { parts.push('(' + c.covers + ')'); }
    return parts.join(', ');
  }
  function progressText(p) {
    if (!p || p.fraction == null) { return ''; }
    return Math.round(p.fraction * 100) + '%' + (p.eta_s != null ? ', about ' + duration(p.eta_s) + ' left' : '') +
      (p.source === 'estimate' ? ' (an estimate)' : '');
  }

  function gaps() {
    var out = [];
    (data.machine || []).forEach(function (m) {
      if (m.kind === 'sleep') {
        out.push({ kind: 'sleep', start: m.start_at, end: m.end_at, host: m.host,
                   label: 'slept ' + duration(m.end_at - m.start_at),
                   long: 'the machine slept (' + m.host + ')' });
      }
    });
    (data.downtime || []).forEach(function (g) {
      out.push({ kind: 'down', start: g.start, end: g.end, host: g.host,
                 label: 'daemon down ' + duration(g.end - g.start),
                 long: 'the daemon was down: ' + g.why + ' (' + g.host + ')' + (g.open ? ', still' : '') });
    });
    return out.sort(function (a, b) { return a.start - b.start; });
  }

  function rows() {
    if (byJob) {
      return data.jobs.map(function (j) { return { label: '#' + j.id + ' ' + commandText(j), jobs: [j] }; });
    }
    var lanes = {};
    data.jobs.forEach(function (j) { (lanes[j.lane] = lanes[j.lane] || []).push(j); });
    return Object.keys(lanes).sort().map(function (l) { return { label: l, jobs: lanes[l] }; });
  }

  // Runs of a row on tracks: each on the first track free at its start (concurrent runs stack).
  function tracks(row) {
    var runs = [];
    row.jobs.forEach(function (j) { (j.runs || []).forEach(function (r) { runs.push({ job: j, run: r }); }); });
    runs.sort(function (a, b) { return a.run.start - b.run.start; });
    var ends = [];
    runs.forEach(function (x) {
      var t = 0;
      while (t < ends.length && ends[t] > x.run.start) { t++; }
      ends[t] = x.run.end;
      x.track = t;
    });
    return { runs: runs, count: Math.max(1, ends.length) };
  }

  var tip = document.getElementById('tip');
  function showTip(ev, text) {
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - tip.offsetWidth - 4) + 'px';
    tip.style.top = (ev.clientY + 14) + 'px';
  }
  function hideTip() { tip.hidden = true; }

  function draw() {
    var chart = document.getElementById('chart');
    chart.textContent = '';
    var width = Math.max(720, chart.clientWidth || 1000);
    var plot = width - LABEL - 8;
    var span = Math.max(view.t1 - view.t0, 1e-6);
    function x(t) { return LABEL + Math.max(0, Math.min(plot, (t - view.t0) / span * plot)); }
    function visible(a, b) { return b >= view.t0 && a <= view.t1; }
    var laid = rows().map(function (r) { var t = tracks(r); return { row: r, runs: t.runs, count: t.count }; });
    var height = RULER + MACHINE + laid.reduce(function (n, r) { return n + r.count * TRACK + PAD; }, 0) + 4;
    var svg = el('svg', { width: width, height: height, viewBox: '0 0 ' + width + ' ' + height, role: 'img',
                          'aria-label': 'timeline' }, chart);

    // the ruler: local round times
    var steps = [60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];
    var step = steps.filter(function (s) { return plot * s / span >= 70; })[0] || 604800;
    var ruler = el('g', { 'class': 'ruler' }, svg);
    el('rect', { x: LABEL, y: 0, width: plot, height: RULER - 4, fill: 'transparent' }, ruler);
    var off = new Date(view.t0 * 1000).getTimezoneOffset() * 60;
    for (var t = Math.ceil((view.t0 - off) / step) * step + off; t <= view.t1; t += step) {
      el('line', { 'class': 'grid', x1: x(t), x2: x(t), y1: RULER - 6, y2: height }, svg);
      if (x(t) + 44 <= width) { el('text', { x: x(t) + 3, y: RULER - 9 }, ruler, clock(t)); }
    }
    ruler.addEventListener('click', function (ev) {
      var box = svg.getBoundingClientRect();
      var at = view.t0 + (ev.clientX - box.left - LABEL) / plot * span;
      zoomHour(at);
    });

    // the machine's sleeps and the daemon's downtime, shaded down the whole chart
    el('text', { 'class': 'label', x: 4, y: RULER + 15 }, svg, 'machine');
    var labelled = -Infinity;  // where the last gap's label ends: the next one is not written over it
    gaps().forEach(function (g) {
      if (!visible(g.start, g.end)) { return; }
      var grp = el('g', { 'class': 'gap ' + g.kind, 'data-start': g.start, 'data-end': g.end }, svg);
      var w = Math.max(2, x(g.end) - x(g.start));
      el('rect', { x: x(g.start), y: RULER, width: w, height: height - RULER }, grp);
      var right = x(g.start) + 160 > LABEL + plot;  // no room on its right: the label ends at the gap's end
      var from = right ? x(g.end) - 3 - 7 * g.label.length : x(g.start) + 3;
      if (from > labelled) {
        el('text', { x: right ? x(g.end) - 3 : x(g.start) + 3, y: RULER + 15, 'text-anchor': right ? 'end' : 'start',
                     'class': 'gap-label' }, grp, g.label);
        labelled = from + 7 * g.label.length + 6;
      }
      grp.addEventListener('mousemove', function (ev) {
        showTip(ev, g.long + '\n' + stamp(g.start) + ' \u2192 ' + stamp(g.end) +
                ' (' + duration(g.end - g.start) + ')');
      });
      grp.addEventListener('mouseleave', hideTip);
    });

    var y = RULER + MACHINE;
    laid.forEach(function (r) {
      var rowH = r.count * TRACK;
      el('line', { 'class': 'grid', x1: 0, x2: width, y1: y - PAD / 2, y2: y - PAD / 2 }, svg);
      el('text', { 'class': 'label', x: 4, y: y + 12 }, svg, cut(r.row.label, 26));
      r.row.jobs.forEach(function (j) {
        (j.waits || []).forEach(function (w) {
          if (!visible(w.start, w.end)) { return; }
          var rect = el('rect', { 'class': 'wait', x: x(w.start), y: y, width: Math.max(1, x(w.end) - x(w.start)),
                                  height: rowH - 2, 'data-job': j.id }, svg);
          rect.addEventListener('mousemove', function (ev) {
            showTip(ev, '#' + j.id + ' ' + cut(commandText(j), 80) + '\nwaiting (' + w.why + ')\n' + stamp(w.start) +
                    ' \u2192 ' + stamp(w.end) + ' (' + duration(w.end - w.start) + ')');
          });
          rect.addEventListener('mouseleave', hideTip);
        });
      });
      r.runs.forEach(function (item) {
        var j = item.job, run = item.run;
        if (!visible(run.start, run.end)) { return; }
        var top = y + item.track * TRACK, w = Math.max(2, x(run.end) - x(run.start));
        var bar = el('rect', { 'class': 'run ' + outcomeClass(run.outcome), x: x(run.start), y: top + 1, width: w,
                               height: TRACK - 3, rx: 2, 'data-job': j.id, 'data-attempt': run.attempt }, svg);
        if (run.outcome === 'failed') {
          var ex = x(run.end);
          var y0 = top + 2, y1 = top + TRACK - 3;
          el('path', { 'class': 'fail-mark',
                       d: 'M' + (ex - 4) + ' ' + y0 + 'L' + (ex + 4) + ' ' + y1 +
                          'M' + (ex + 4) + ' ' + y0 + 'L' + (ex - 4) + ' ' + y1 }, svg);
        }
        bar.addEventListener('mousemove', function (ev) {
          var lines = ['#' + j.id + ' ' + cut(commandText(j), 80),
                       'attempt ' + run.attempt + ': ' + stamp(run.start) + ' \u2192 ' +
                       (run.open ? 'now' : stamp(run.end)) + ' (' + duration(run.end - run.start) + ')',
                       run.outcome + (run.message ? ': ' + cut(run.message, 80) : '')];
          var c = costText(run.cost || (run.attempt === j.attempts ? j.cost : null));
          if (c) { lines.push(c); }
          var p = run.open ? progressText(j.progress) : '';
          if (p) { lines.push(p); }
          showTip(ev, lines.join('\n'));
        });
        bar.addEventListener('mouseleave', hideTip);
        bar.addEventListener('click', function () { detail(j, bar); });
      });
      y += rowH + PAD;
    });
    document.getElementById('range').textContent = stamp(view.t0) + ' \u2192 ' + stamp(view.t1);
    document.getElementById('rows').textContent = byJob ? 'one row per lane' : 'one row per job';
    document.body.setAttribute('data-rendered', String(Number(document.body.getAttribute('data-rendered') || 0) + 1));
  }

  function detail(j, bar) {
    Array.prototype.forEach.call(document.querySelectorAll('rect.run.selected'), function (e) {
      e.classList.remove('selected');
    });
    if (bar) { bar.classList.add('selected'); }
    var box = document.getElementById('detail');
    box.textContent = '';
    box.hidden = false;
    box.setAttribute('data-job', j.id);
    h('h2', box, '#' + j.id + ' ' + commandText(j));
    var facts = ['state ' + j.state, 'lane ' + j.lane, 'attempts ' + j.attempts];
    if (j.exit_code != null) { facts.push('exit ' + j.exit_code); }
    if (progressText(j.progress)) { facts.push('progress ' + progressText(j.progress)); }
    if (costText(j.cost)) { facts.push('cost ' + costText(j.cost)); }
    h('p', box, facts.join(' \u00b7 '));
    (j.runs || []).forEach(function (r) {
      if (r.cost) { h('p', box, 'attempt ' + r.attempt + ': ' + costText(r.cost)); }
    });
    h('h3', box, 'history');
    var table = h('table', box);
    (j.events || []).forEach(function (e) {
      var tr = h('tr', table);
      h('td', tr, stamp(e.at));
      h('td', tr, e.kind);
      h('td', tr, 'attempt ' + e.attempt);
      h('td', tr, e.message || '');
    });
    h('h3', box, 'log' + (j.attempts ? ' (attempt ' + j.attempts + ', last lines)' : ''));
    if (j.log && j.log.length) { h('pre', box, j.log.join('\n')); } else { h('p', box, j.log_note || 'no log'); }
  }

  function zoomHour(at) {
    var half = 1800;
    var t0 = Math.max(data.since, Math.min(at - half, data.until - 2 * half));
    view = { t0: t0, t1: Math.min(data.until, t0 + 2 * half) };
    draw();
  }
  function pan(by) {
    var w = view.t1 - view.t0;
    var t0 = Math.max(data.since, Math.min(view.t0 + by, data.until - w));
    view = { t0: t0, t1: t0 + w };
    draw();
  }
  document.getElementById('all').addEventListener('click', function () {
    view = { t0: data.since, t1: data.until }; draw();
  });
  document.getElementById('hour').addEventListener('click', function () { zoomHour(data.until - 1800); });
  document.getElementById('back').addEventListener('click', function () { pan(-3600); });
  document.getElementById('ahead').addEventListener('click', function () { pan(3600); });
  document.getElementById('rows').addEventListener('click', function () { byJob = !byJob; draw(); });
  window.addEventListener('resize', draw);
  document.addEventListener('keydown', function (ev) { if (ev.key === 'Escape') { hideTip(); } });

  var all = gaps(), runs = 0, failed = 0;
  data.jobs.forEach(function (j) {
    (j.runs || []).forEach(function (r) { runs++; if (r.outcome === 'failed') { failed++; } });
  });
  document.getElementById('summary').textContent = data.jobs.length + ' jobs, ' + runs + ' runs, ' + failed +
    ' failed' + (data.capped ? ' (only the newest jobs were read)' : '') + '; made ' + stamp(data.until);
  var list = document.getElementById('gaps');
  all.forEach(function (g) {
    h('li', list, g.long + ': ' + stamp(g.start) + ' \u2192 ' + stamp(g.end) + ' (' + duration(g.end - g.start) + ')')
      .className = 'gap-' + g.kind;
  });
  draw();
  var asked = /^#job=(\d+)$/.exec(location.hash);  // a link to one job: its detail open
  if (asked && jobsById[asked[1]]) {
    detail(jobsById[asked[1]], document.querySelector('rect.run[data-job="' + asked[1] + '"]'));
  }
})();
"""
