// Shardgate's partition page: polls /api/overview and
// /api/collections/{db}/{coll} and draws what they say. No framework and
// nothing fetched from elsewhere; every value from the server goes into
// the page as text, never as markup.
"use strict";

(() => {
  const POLL_MS = 2000;
  const TAU = Math.PI * 2;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const MAX_STORAGE_ROWS = 48;
  const MAX_TABLE_ROWS = 256;
  const RING_LABELS_UP_TO = 24;

  const state = {
    overview: null,
    detail: null,
    ns: null,          // the collection asked for in the URL, "db.coll"
    metric: "ops",     // the heat map's measure: "ops" or "ru"
    paused: false,
    lastOk: 0,
    failing: false,
    timer: null,
    heat: null,        // what the heat canvas shows, for its tooltip
    rendered: false,
  };

  // ---- small helpers ------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    applyProps(node, props);
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function svg(tag, props) {
    const node = document.createElementNS(SVG_NS, tag);
    applyProps(node, props);
    return node;
  }

  function applyProps(node, props) {
    if (!props) return;
    for (const [k, v] of Object.entries(props)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") node.textContent = String(v);
      else if (k === "class") node.setAttribute("class", v);
      else if (k === "style" && typeof v === "object") Object.assign(node.style, v);
      else if (k === "tip") node.tip = v;
      else node.setAttribute(k, String(v));
    }
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  const num = (x) => (typeof x === "number" && isFinite(x) ? x : 0);

  function fmtInt(n) {
    return Math.round(num(n)).toLocaleString("en-US");
  }

  function fmtCompact(n) {
    n = num(n);
    const a = Math.abs(n);
    if (a < 1000) return a >= 100 || Number.isInteger(n) ? String(Math.round(n)) : n.toFixed(1);
    const units = [["k", 1e3], ["M", 1e6], ["G", 1e9], ["T", 1e12]];
    let [u, d] = units[0];
    for (const [uu, dd] of units) if (a >= dd) [u, d] = [uu, dd];
    const v = n / d;
    return (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(1)) + u;
  }

  function fmtRate(x) {
    x = num(x);
    if (x === 0) return "0";
    if (x < 0.1) return "<0.1";
    if (x < 10) return x.toFixed(1);
    return fmtCompact(x);
  }

  function fmtBytes(b) {
    b = num(b);
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let i = 0;
    while (b >= 1024 && i < units.length - 1) {
      b /= 1024;
      i++;
    }
    return (i === 0 ? String(Math.round(b)) : b >= 100 ? b.toFixed(0) : b.toFixed(1)) + " " + units[i];
  }

  function fmtPercent(f) {
    f = num(f) * 100;
    if (f === 0) return "0%";
    if (f < 0.1) return "<0.1%";
    if (f < 10) return f.toFixed(1) + "%";
    return f.toFixed(0) + "%";
  }

  function fmtClock(ms) {
    const d = new Date(ms);
    const p = (x) => String(x).padStart(2, "0");
    return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }

  function fmtDuration(secs) {
    secs = Math.max(0, Math.floor(num(secs)));
    const d = Math.floor(secs / 86400), h = Math.floor((secs % 86400) / 3600);
    const m = Math.floor((secs % 3600) / 60), s = secs % 60;
    if (d) return `${d}d ${h}h`;
    if (h) return `${h}h ${m}m`;
    if (m) return s ? `${m}m ${s}s` : `${m} min`;
    return `${s}s`;
  }

  const I64_MIN = "-9223372036854775808";
  const I64_MAX = "9223372036854775807";

  function fmtHash(h) {
    if (h === I64_MIN) return "MinKey";
    if (h === I64_MAX) return "MaxKey";
    return h;
  }

  function fmtRange(p) {
    return `[${fmtHash(p.min)}, ${fmtHash(p.max)}]`;
  }

  // An "inferno"-like ramp: dark, purple, red, orange, pale yellow. Cells
  // are coloured on a log scale so that one very hot partition does not
  // wash out the rest.
  const RAMP = [
    [40, 22, 86], [86, 29, 120], [140, 41, 129], [199, 62, 115],
    [240, 96, 93], [254, 159, 109], [252, 220, 150], [252, 253, 191],
  ];
  const IDLE = "#161c2a";

  function rampColor(t) {
    t = Math.min(1, Math.max(0, t));
    const x = t * (RAMP.length - 1);
    const i = Math.min(RAMP.length - 2, Math.floor(x));
    const f = x - i;
    const c = RAMP[i].map((v, k) => Math.round(v + (RAMP[i + 1][k] - v) * f));
    return `rgb(${c[0]},${c[1]},${c[2]})`;
  }

  function heatColor(v, max) {
    if (!(v > 0) || !(max > 0)) return IDLE;
    return rampColor(Math.log1p(v) / Math.log1p(max));
  }

  // ---- tooltip ------------------------------------------------------------

  const tooltip = $("tooltip");

  function showTip(x, y, title, rows) {
    clear(tooltip);
    tooltip.append(el("div", null, el("b", { text: title })));
    for (const [k, v] of rows) tooltip.append(el("div", { class: "t-row" }, el("span", { text: k }), el("span", { text: v })));
    tooltip.hidden = false;
    const r = tooltip.getBoundingClientRect();
    const left = Math.min(window.innerWidth - r.width - 8, x + 14);
    const top = y + 14 + r.height > window.innerHeight ? y - r.height - 10 : y + 14;
    tooltip.style.left = `${Math.max(4, left)}px`;
    tooltip.style.top = `${Math.max(4, top)}px`;
  }

  function hideTip() {
    tooltip.hidden = true;
  }

  document.addEventListener("mousemove", (e) => {
    let node = e.target;
    while (node && node !== document && !node.tip) node = node.parentNode;
    if (node && node.tip) {
      const [title, rows] = node.tip();
      showTip(e.clientX, e.clientY, title, rows);
    } else if (e.target !== $("heat")) {
      hideTip();
    }
  });

  function partitionTip(p, detail) {
    return () => [p.name, [
      ["hash range", fmtRange(p)],
      ["share of hash space", fmtPercent(num(p.end) - num(p.start))],
      ["documents", fmtInt(p.documents)],
      ["size", fmtBytes(p.bytes)],
      ["of split size", fmtPercent(num(p.bytes) / Math.max(1, num(detail.splitBytes)))],
      ["ops/s now", fmtRate(p.opsPerSec)],
      ["RU/s now", fmtRate(p.ruPerSec)],
      ["reads · writes", `${fmtInt(p.reads)} · ${fmtInt(p.writes)}`],
      ["fan-outs", fmtInt(p.fanouts)],
      ["throttled", fmtInt(p.throttled)],
    ]];
  }

  // ---- data ---------------------------------------------------------------

  async function getJSON(path) {
    const res = await fetch(path, { cache: "no-store", headers: { Accept: "application/json" } });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) {
      const err = new Error(body.error || `${res.status} ${res.statusText}`);
      err.status = res.status;
      throw err;
    }
    return body;
  }

  function nsFromHash() {
    const h = decodeURIComponent(location.hash.replace(/^#/, ""));
    return h.includes(".") ? h : null;
  }

  function splitNs(ns) {
    const i = ns.indexOf(".");
    return [ns.slice(0, i), ns.slice(i + 1)];
  }

  // The collection to show: the one in the URL, else the busiest sharded
  // one, else any sharded one, else the first.
  function chooseNs() {
    const colls = (state.overview && state.overview.collections) || [];
    if (state.ns && colls.some((c) => c.ns === state.ns)) return state.ns;
    if (!colls.length) return null;
    const sharded = colls.filter((c) => c.sharded);
    const pool = sharded.length ? sharded : colls;
    const busiest = pool.reduce((a, b) => (num(b.opsPerSec) > num(a.opsPerSec) ? b : a), pool[0]);
    return busiest.ns;
  }

  async function refresh() {
    clearTimeout(state.timer);
    if (!state.paused) {
      try {
        state.overview = await getJSON("/api/overview");
        const ns = chooseNs();
        // Stay on it until the person picks another (or it is dropped).
        state.ns = ns;
        if (ns) {
          const [db, coll] = splitNs(ns);
          state.detail = await getJSON(`/api/collections/${encodeURIComponent(db)}/${encodeURIComponent(coll)}`);
        } else {
          state.detail = null;
        }
        state.lastOk = Date.now();
        state.failing = false;
        render();
      } catch (e) {
        state.failing = true;
        if (e.status === 404) state.ns = null;
      }
      renderLive();
    }
    state.timer = setTimeout(refresh, POLL_MS);
  }

  // ---- rendering ----------------------------------------------------------

  function render() {
    renderServer();
    renderSidebar();
    const d = state.detail;
    $("empty").hidden = !!d;
    $("summary").hidden = !d;
    $("grid").hidden = !d;
    const view = $("view");
    if (!d) {
      view.dataset.ns = "";
      view.dataset.partitionCount = "0";
      view.dataset.hottest = "";
      view.dataset.topKey = "";
      document.body.dataset.ready = "true";
      return;
    }
    renderSummary(d);
    renderRing(d);
    renderHeat(d);
    renderStorage(d);
    renderKeys(d);
    renderSplits(d);
    renderTable(d);
    view.dataset.ns = d.ns;
    view.dataset.partitionCount = String(d.partitions.length);
    view.dataset.hottest = d.hottest || "";
    const top = d.hotKeys && d.hotKeys.keys && d.hotKeys.keys[0];
    view.dataset.topKey = top ? top.value : "";
    document.title = `${d.ns} · Shardgate`;
    document.body.dataset.ready = "true";
    state.rendered = true;
  }

  function renderLive() {
    const live = $("live");
    live.classList.toggle("paused", state.paused);
    live.classList.toggle("stale", !state.paused && state.failing);
    let text;
    if (state.paused) text = "paused";
    else if (!state.lastOk) text = state.failing ? "cannot reach the server…" : "connecting…";
    else {
      const ago = Math.round((Date.now() - state.lastOk) / 1000);
      text = state.failing ? `server not answering · last update ${ago}s ago` : ago <= 1 ? "live" : `updated ${ago}s ago`;
    }
    $("updated").textContent = text;
    $("pause").textContent = state.paused ? "Resume" : "Pause";
  }

  function renderServer() {
    const o = state.overview;
    const box = $("server");
    clear(box);
    if (!o) return;
    const item = (label, value) => el("span", null, label + " ", el("b", { text: value }));
    box.append(
      item("version", o.version),
      item("up", fmtDuration(o.uptimeSecs)),
      item("split size", fmtBytes(o.splitBytes)),
      item("collections", fmtInt((o.collections || []).length)),
    );
  }

  function renderSidebar() {
    const o = state.overview;
    const list = $("collections");
    clear(list);
    const colls = (o && o.collections) || [];
    const filter = $("filter").value.trim().toLowerCase();
    const shown = colls.filter((c) => !filter || c.ns.toLowerCase().includes(filter));
    const maxRate = Math.max(0, ...colls.map((c) => num(c.opsPerSec)));
    const current = state.detail ? state.detail.ns : null;
    let db = null;
    for (const c of shown) {
      if (c.db !== db) {
        db = c.db;
        list.append(el("div", { class: "db-name", text: db }));
      }
      const meta = c.sharded
        ? `${fmtInt(c.partitions)} partitions · ${fmtCompact(c.documents)} docs · ${fmtBytes(c.bytes)}`
        : `unsharded · ${fmtCompact(c.documents)} docs · ${fmtBytes(c.bytes)}`;
      const dot = el("i", { style: { background: heatColor(num(c.opsPerSec), maxRate) } });
      const link = el("a", {
        class: "coll" + (c.ns === current ? " selected" : ""),
        href: "#" + encodeURIComponent(c.ns),
        "data-ns": c.ns,
        title: c.ns,
      },
        el("span", { class: "name", text: c.coll }),
        el("span", { class: "rate" }, dot, `${fmtRate(c.opsPerSec)}/s`),
        el("span", { class: "meta", text: meta }),
      );
      list.append(link);
    }
    $("sidebar-note").textContent = colls.length
      ? filter && !shown.length ? "No collection matches." : "Rates are operations per second over the last 10 s."
      : "";
  }

  function chip(label, value, cls, note) {
    return el("div", { class: "chip" + (cls ? " " + cls : "") },
      el("div", { class: "label", text: label }),
      el("div", { class: "value", text: value }),
      note ? el("div", { class: "note", text: note }) : null);
  }

  // The hottest partition's share of the operations of the last 10 s.
  function hottestShare(d) {
    const total = d.partitions.reduce((a, p) => a + num(p.opsPerSec), 0);
    const hot = d.partitions.find((p) => p.name === d.hottest);
    return hot && total > 0 ? num(hot.opsPerSec) / total : null;
  }

  function renderSummary(d) {
    $("ns").textContent = d.ns;
    $("key").textContent = d.sharded ? `{ ${d.key}: "hashed" }` : "unsharded · one partition";
    const now = d.partitions.reduce((a, p) => [a[0] + num(p.opsPerSec), a[1] + num(p.ruPerSec)], [0, 0]);
    const chips = $("chips");
    clear(chips);
    chips.append(
      chip("partitions", fmtInt(d.partitions.length)),
      chip("documents", fmtCompact(d.documents)),
      chip("size", fmtBytes(d.bytes)),
      chip("ops/s now", fmtRate(now[0])),
      chip("RU/s now", fmtRate(now[1])),
    );
    if (d.provisionedPerPartition > 0) chips.append(chip("RU/s per partition", fmtInt(d.provisionedPerPartition)));
    if (d.sharded) chips.append(chip("splits", fmtInt(d.splitCount)));
    const share = hottestShare(d);
    const even = d.partitions.length > 1 ? ` (even: ${fmtPercent(1 / d.partitions.length)})` : "";
    chips.append(chip("hottest partition", d.hottest || "—", d.hottest ? "hot" : "",
      share === null ? null : `${fmtPercent(share)} of ops now${even}`));
  }

  // A ring sector from angle a0 to a1 (radians, 0 at the top, clockwise).
  function sector(cx, cy, r0, r1, a0, a1) {
    const pt = (r, a) => `${(cx + r * Math.sin(a)).toFixed(2)} ${(cy - r * Math.cos(a)).toFixed(2)}`;
    if (a1 - a0 >= TAU - 1e-6) {
      return `M ${pt(r1, 0)} A ${r1} ${r1} 0 1 1 ${pt(r1, Math.PI)} A ${r1} ${r1} 0 1 1 ${pt(r1, 0)} Z ` +
        `M ${pt(r0, 0)} A ${r0} ${r0} 0 1 0 ${pt(r0, Math.PI)} A ${r0} ${r0} 0 1 0 ${pt(r0, 0)} Z`;
    }
    const large = a1 - a0 > Math.PI ? 1 : 0;
    return `M ${pt(r1, a0)} A ${r1} ${r1} 0 ${large} 1 ${pt(r1, a1)} L ${pt(r0, a1)} A ${r0} ${r0} 0 ${large} 0 ${pt(r0, a0)} Z`;
  }

  function measureOf(p) {
    return state.metric === "ru" ? num(p.ruPerSec) : num(p.opsPerSec);
  }

  function renderRing(d) {
    const ring = $("ring");
    clear(ring);
    const cx = 180, cy = 180, r1 = 138, r0 = 92;
    const max = Math.max(0, ...d.partitions.map(measureOf));
    // Quarter ticks of the hash space.
    const ticks = [[0, "±2⁶³"], [0.25, "−2⁶²"], [0.5, "0"], [0.75, "2⁶²"]];
    for (const [f, label] of ticks) {
      const a = f * TAU;
      const x = (r) => cx + r * Math.sin(a), y = (r) => cy - r * Math.cos(a);
      ring.append(svg("line", { class: "tick", x1: x(r0 - 6), y1: y(r0 - 6), x2: x(r0 - 1), y2: y(r0 - 1) }));
      const t = svg("text", { class: "tick-label", x: x(r0 - 16), y: y(r0 - 16) + 3, "text-anchor": "middle" });
      t.textContent = label;
      ring.append(t);
    }
    const labelled = d.partitions.length <= RING_LABELS_UP_TO;
    for (const p of d.partitions) {
      const a0 = num(p.start) * TAU, a1 = num(p.end) * TAU;
      const hot = p.name === d.hottest;
      const fill = max > 0 ? heatColor(measureOf(p), max) : "#26324b";
      const path = svg("path", {
        class: "arc",
        d: sector(cx, cy, r0, r1, a0, Math.max(a1, a0 + 0.002)),
        fill,
        "fill-rule": "evenodd",
        "data-partition": p.name,
      });
      path.tip = partitionTip(p, d);
      ring.append(path);
      if (hot && a1 - a0 < TAU - 1e-6) {
        ring.append(svg("path", {
          class: "hot-mark",
          d: arcOnly(cx, cy, r1 + 7, a0 + 0.01, Math.max(a0 + 0.02, a1 - 0.01)),
        }));
      }
      if (labelled) {
        const mid = (a0 + a1) / 2;
        const r = r1 + 20;
        const t = svg("text", {
          class: "label" + (hot ? " hot" : ""),
          x: cx + r * Math.sin(mid),
          y: cy - r * Math.cos(mid) + 3.5,
          "text-anchor": "middle",
        });
        t.textContent = p.name;
        ring.append(t);
      }
    }
    const center = (cls, y, text) => {
      const t = svg("text", { class: cls, x: cx, y, "text-anchor": "middle" });
      t.textContent = text;
      ring.append(t);
    };
    center("center-big", cy + 4, fmtInt(d.partitions.length));
    center("center-small", cy + 24, d.partitions.length === 1 ? "partition" : "partitions");
    if (d.hottest) center("center-hot", cy + 44, `hottest ${d.hottest}`);

    const legend = $("ring-legend");
    clear(legend);
    legend.append(
      el("span", null, el("i", { style: { background: "#26324b" } }), "idle"),
      el("span", null, el("i", { style: { background: rampColor(0.35) } }), "warm"),
      el("span", null, el("i", { style: { background: rampColor(1) } }), state.metric === "ru" ? "most RU/s" : "most ops/s"),
    );
  }

  function arcOnly(cx, cy, r, a0, a1) {
    const pt = (a) => `${(cx + r * Math.sin(a)).toFixed(2)} ${(cy - r * Math.cos(a)).toFixed(2)}`;
    const large = a1 - a0 > Math.PI ? 1 : 0;
    return `M ${pt(a0)} A ${r} ${r} 0 ${large} 1 ${pt(a1)}`;
  }

  function renderHeat(d) {
    const heat = d.heat || { rows: [], times: [] };
    const kept = Math.max(1, num(state.overview && state.overview.windowFrames) || heat.times.length || 1);
    const intervalMs = num(heat.intervalMillis) || 1000;
    const rows = heat.rows || [];
    const n = (heat.times || []).length;
    // A young history is drawn over at least a minute, not squeezed
    // into the right edge of the whole window.
    const frames = Math.min(kept, Math.max(60, n));
    const values = rows.map((r) => (state.metric === "ru" ? r.ru : r.ops) || []);
    let max = 0;
    for (const vs of values) for (const v of vs) if (v > max) max = v;

    const canvas = $("heat");
    const width = Math.max(200, canvas.parentElement.clientWidth);
    const rowH = rows.length > 48 ? 5 : Math.max(9, Math.min(30, Math.floor(300 / Math.max(1, rows.length))));
    const height = Math.max(rowH, rowH * rows.length);
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.height = `${height}px`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#0f1420";
    ctx.fillRect(0, 0, width, height);
    const colW = width / frames;
    const offset = frames - n; // the newest column at the right edge
    const gap = rowH >= 9 ? 1 : 0;
    for (let r = 0; r < rows.length; r++) {
      const y = r * rowH;
      ctx.fillStyle = rows[r].retired ? "#121722" : IDLE;
      ctx.fillRect(offset * colW, y, n * colW, rowH - gap);
      const vs = values[r];
      for (let i = 0; i < n; i++) {
        const v = vs[i];
        if (!(v > 0)) continue;
        ctx.fillStyle = heatColor(v, max);
        ctx.fillRect((offset + i) * colW, y, Math.ceil(colW + 0.5), rowH - gap);
      }
    }
    const hotIndex = rows.findIndex((r) => r.name === d.hottest);
    if (hotIndex >= 0) {
      ctx.strokeStyle = "#ff7a3d";
      ctx.lineWidth = 1.5;
      ctx.strokeRect(0.75, hotIndex * rowH + 0.75, width - 1.5, rowH - gap - 1.5);
    }
    state.heat = { rows, values, times: heat.times || [], colW, rowH, offset, n };

    const labels = $("heat-labels");
    clear(labels);
    const every = rowH >= 9 ? 1 : Math.ceil(10 / rowH);
    rows.forEach((r, i) => {
      const cls = [r.name === d.hottest ? "hot" : "", r.retired ? "retired" : ""].join(" ").trim();
      labels.append(el("div", {
        class: cls || null,
        style: { height: `${rowH}px`, fontSize: rowH < 11 ? "9px" : null },
        "data-partition": r.name,
        text: i % every === 0 || r.name === d.hottest ? (r.name === d.hottest ? `▲ ${r.name}` : r.name) : "",
        title: r.retired ? `${r.name} (split since)` : r.name,
      }));
    });

    const axis = $("heat-axis");
    clear(axis);
    const windowSecs = (frames * intervalMs) / 1000;
    const step = windowSecs > 240 ? 60 : windowSecs > 120 ? 30 : windowSecs > 60 ? 20 : 10;
    const marks = [];
    for (let s = windowSecs; s > 0; s -= step) marks.push(s);
    for (const s of marks) {
      const x = ((windowSecs - s) / windowSecs) * 100;
      axis.append(el("span", { style: { left: `${x}%` }, text: s >= 60 ? `−${Math.round(s / 60)} min` : `−${s}s` }));
    }
    axis.append(el("span", { style: { left: "100%" }, text: "now" }));

    const unit = state.metric === "ru" ? "RU/s" : "ops/s";
    const perSec = 1000 / intervalMs;
    $("scale-max").textContent = `${fmtRate(max * perSec)} ${unit}`;
    const what = state.metric === "ru" ? "request units" : "operations";
    $("heat-hint").textContent = `${what} per partition, per second, last ${fmtDuration(windowSecs)}`;
    const notes = [];
    if (!n) notes.push("collecting: the first column appears after a second");
    else if (n < frames) notes.push(`history since ${fmtClock(heat.times[0])}`);
    if (heat.omitted > 0) notes.push(`${fmtInt(heat.omitted)} quieter partitions not drawn`);
    if (rows.some((r) => r.retired)) notes.push("struck-through rows: partitions split since");
    $("heat-note").textContent = notes.join(" · ");
  }

  $("heat").addEventListener("mousemove", (e) => {
    const h = state.heat;
    if (!h) return;
    const rect = e.target.getBoundingClientRect();
    const col = Math.floor((e.clientX - rect.left) / h.colW) - h.offset;
    const row = Math.floor((e.clientY - rect.top) / h.rowH);
    if (row < 0 || row >= h.rows.length || col < 0 || col >= h.n) {
      hideTip();
      return;
    }
    const r = h.rows[row];
    showTip(e.clientX, e.clientY, r.name + (r.retired ? " (split since)" : ""), [
      ["at", fmtClock(h.times[col])],
      ["operations", fmtInt((r.ops || [])[col])],
      ["request units", num((r.ru || [])[col]).toFixed(2)],
    ]);
  });
  $("heat").addEventListener("mouseleave", hideTip);

  function renderStorage(d) {
    const box = $("storage");
    clear(box);
    const split = Math.max(1, num(d.splitBytes));
    let parts = d.partitions;
    let note = "";
    if (parts.length > MAX_STORAGE_ROWS) {
      const keep = new Set([...parts].sort((a, b) => num(b.bytes) - num(a.bytes)).slice(0, MAX_STORAGE_ROWS).map((p) => p.name));
      parts = parts.filter((p) => keep.has(p.name));
      note = `the ${MAX_STORAGE_ROWS} largest of ${fmtInt(d.partitions.length)} partitions`;
    }
    const largest = Math.max(0, ...d.partitions.map((p) => num(p.bytes)));
    // Against the split size when some partition is near it; otherwise
    // scaled to the largest, with the split size said in words.
    const nearSplit = d.sharded && largest >= split * 0.05;
    const scale = nearSplit ? Math.max(split, largest) * 1.06 : Math.max(1, largest) * 1.08;
    for (const p of parts) {
      const frac = num(p.bytes) / split;
      const color = frac >= 0.8 ? "var(--bad)" : frac >= 0.5 ? "var(--warn)" : "var(--good)";
      const bar = el("div", { class: "sbar" },
        el("div", { class: "fill", style: { width: `${(num(p.bytes) / scale) * 100}%`, background: color } }));
      if (nearSplit) bar.append(el("div", { class: "limit", style: { left: `${(split / scale) * 100}%` }, title: `split at ${fmtBytes(split)}` }));
      const row = el("div", { class: "srow" + (p.name === d.hottest ? " hot" : ""), "data-partition": p.name },
        el("span", { class: "pname", text: p.name }),
        bar,
        el("span", { class: "sval", text: nearSplit ? `${fmtBytes(p.bytes)} · ${fmtPercent(frac)} of split` : `${fmtBytes(p.bytes)} · ${fmtCompact(p.documents)} docs` }));
      row.tip = partitionTip(p, d);
      box.append(row);
    }
    const foot = el("div", { class: "storage-foot" });
    if (nearSplit) foot.append(el("span", null, el("i"), `split size ${fmtBytes(split)}: a partition past it splits in two`));
    else if (d.sharded) foot.append(el("span", { text: `bars to scale with the largest partition; every partition is under 5% of the ${fmtBytes(split)} split size` }));
    box.append(foot);
    $("storage-hint").textContent = note || (d.sharded ? "bytes of documents per partition" : "one partition: an unsharded collection never splits");
  }

  function renderKeys(d) {
    const body = $("keys");
    clear(body);
    const hk = d.hotKeys || { keys: [] };
    const keys = hk.keys || [];
    const empty = $("keys-empty");
    empty.hidden = keys.length > 0;
    body.parentElement.hidden = keys.length === 0;
    if (!d.sharded) {
      empty.textContent = "An unsharded collection has no shard key.";
      empty.hidden = false;
      body.parentElement.hidden = true;
    } else if (!keys.length) {
      empty.textContent = "No targeted operations sampled lately. Reads, updates and deletes that name the shard key, and inserts, appear here.";
    }
    keys.forEach((k, i) => {
      const approx = (num(k.count) - num(k.error)) * num(hk.sampleEvery);
      // The first value stands out only when it is a real share of
      // the load, not the top of an even spread.
      const lead = i === 0 && num(k.share) >= 0.1;
      const tr = el("tr", { class: lead ? "lead" : null, "data-key": k.value },
        el("td", { text: String(i + 1) }),
        el("td", { class: "kval", text: k.value, title: `${k.value}\nhash ${k.hash}` }),
        el("td", null, el("span", { class: "pchip" + (k.partition === d.hottest ? " hot" : ""), text: k.partition })),
        el("td", null, el("div", { class: "share" },
          el("div", { class: "bar" }, el("div", { style: { width: `${Math.min(100, num(k.share) * 100)}%` } })),
          el("span", { text: fmtPercent(k.share) }))));
      tr.tip = () => [k.value, [
        ["partition", k.partition],
        ["hash", k.hash],
        ["share of sampled", fmtPercent(k.share)],
        ["samples", k.error ? `${fmtInt(num(k.count) - num(k.error))} to ${fmtInt(k.count)}` : fmtInt(k.count)],
        ["≈ operations", fmtInt(approx)],
      ]];
      body.append(tr);
    });
    $("keys-hint").textContent = d.sharded
      ? `1 in ${hk.sampleEvery} targeted operations sampled · ${fmtInt(hk.sampled)} samples, recent ones weighing most`
      : "";
  }

  function renderSplits(d) {
    const list = $("splits");
    clear(list);
    const splits = d.splits || [];
    const empty = $("splits-empty");
    empty.hidden = splits.length > 0;
    empty.textContent = d.sharded
      ? `No splits since the server started. A partition splits in two at the median hash of its bytes once it holds more than ${fmtBytes(d.splitBytes)}.`
      : "An unsharded collection is one partition and never splits.";
    for (const s of splits) {
      const [a, b] = s.children;
      list.append(el("li", null,
        el("time", { text: fmtClock(s.at), title: new Date(s.at).toString() }),
        el("div", null,
          el("div", { class: "what" }, el("b", { text: s.parent.name }), " → ", el("b", { text: a.name }), " + ", el("b", { text: b.name })),
          el("div", { class: "detail", text: `${a.name}: ${fmtCompact(a.documents)} docs, ${fmtBytes(a.bytes)} · ${b.name}: ${fmtCompact(b.documents)} docs, ${fmtBytes(b.bytes)}` }),
          el("div", { class: "detail", text: `at hash ${b.min}` }))));
    }
    $("splits-hint").textContent = d.sharded ? `${fmtInt(d.splitCount)} since start` : "";
  }

  function renderTable(d) {
    const body = $("partitions");
    clear(body);
    for (const p of d.partitions.slice(0, MAX_TABLE_ROWS)) {
      const tr = el("tr", { class: p.name === d.hottest ? "hot" : null, "data-partition": p.name },
        el("td", { text: p.name }),
        el("td", { class: "range", text: fmtRange(p) }),
        el("td", { class: "num", text: fmtInt(p.documents) }),
        el("td", { class: "num", text: fmtBytes(p.bytes) }),
        el("td", { class: "num", text: fmtRate(p.opsPerSec) }),
        el("td", { class: "num", text: fmtRate(p.ruPerSec) }),
        el("td", { class: "num", text: fmtInt(p.reads) }),
        el("td", { class: "num", text: fmtInt(p.writes) }),
        el("td", { class: "num", text: fmtInt(p.fanouts) }),
        el("td", { class: "num", text: fmtCompact(p.ru) }),
        el("td", { class: "num", text: fmtInt(p.throttled) }));
      body.append(tr);
    }
    if (d.partitions.length > MAX_TABLE_ROWS) {
      body.append(el("tr", null, el("td", { colspan: 11, class: "range", text: `and ${fmtInt(d.partitions.length - MAX_TABLE_ROWS)} more partitions` })));
    }
  }

  // ---- events -------------------------------------------------------------

  window.addEventListener("hashchange", () => {
    state.ns = nsFromHash();
    refresh();
  });

  $("filter").addEventListener("input", renderSidebar);

  $("pause").addEventListener("click", () => {
    state.paused = !state.paused;
    renderLive();
    if (!state.paused) refresh();
  });

  for (const b of document.querySelectorAll(".toggle button")) {
    b.addEventListener("click", () => {
      state.metric = b.dataset.metric;
      for (const o of document.querySelectorAll(".toggle button")) o.classList.toggle("on", o === b);
      if (state.detail) {
        renderRing(state.detail);
        renderHeat(state.detail);
      }
    });
  }

  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => state.detail && renderHeat(state.detail), 100);
  });

  setInterval(renderLive, 1000);

  state.ns = nsFromHash();
  refresh();
})();
