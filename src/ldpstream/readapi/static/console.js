// The ldpstream console (`ldpstream.readapi.console`): the catalogue of collections (`/console/`) and a page per
// collection (`/console/collection?name=NAME`) with each attribute's live series, its 95% band, and a histogram of the
// newest window; a numeric attribute reported by a distribution mechanism (sw, hh) also has its distribution in the
// newest window with data: density, CDF with its 95% band, and marks at the median, 90% and 99% quantiles. The
// attributes are panels in a grid; a time-range picker chooses the windows shown (the last 48, a preset duration, or
// from/to); every time is UTC, and a window still open (filling) is marked partial. An unknown collection's page says
// so and lists the published ones, nearest names first. Reads `/collections`, `/collections/NAME/series` and
// `/collections/NAME/distribution` with the bearer token the person gave (the address's `#token=...`, or the form),
// kept in this tab's sessionStorage. Outside text goes into the page as text.
// The catalogue also lists the published training jobs; a job's page (`/console/job?name=JOB`, from `/jobs/JOB`) shows
// its model version, the held-out accuracy and loss per version with their 95% bands, the updates accepted and refused
// by reason, and epsilon per report and over a device's lifetime.
"use strict";

(function () {
  const TOKEN_KEY = "ldp-console-token";
  const REFRESH_MS = 5000;
  const MAX_LINES = 8; // lines per chart: the largest estimates of the newest window
  const HEIGHT = 220; // of a panel's charts, in CSS pixels
  const MAX_WINDOWS = 1000; // windows one series request may span (`ldpstream.readapi.series.MAX_WINDOWS`)
  const DURATIONS = { "15m": 900e3, "1h": 3600e3, "6h": 6 * 3600e3, "24h": 24 * 3600e3, "7d": 7 * 86400e3,
    "30d": 30 * 86400e3 };
  const COLORS = ["#2f6fde", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0b7285", "#a61e4d", "#5c940d"];
  // Mechanisms whose attributes have a distribution (`DistributionMechanism`), and the quantiles marked on its chart.
  const DISTRIBUTION_MECHANISMS = ["sw", "hh"];
  const MARKS = [["0.5", "median"], ["0.9", "90%"], ["0.99", "99%"]];
  // What the tests read: the series and distributions shown, points per chart, refreshes done, the page's state.
  const state = { ready: false, refreshes: 0, series: {}, points: {}, distributions: {}, partial: {}, error: null,
    renderedAt: null, range: null, missing: null, job: null };
  window.ldpConsole = state;
  let token = null;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function status(text, isError) {
    const node = document.getElementById("status");
    node.textContent = text;
    node.className = isError ? "error" : "";
    if (isError) state.error = text;
  }

  function takeToken() {
    const found = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (found) {
      sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(found[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
    return sessionStorage.getItem(TOKEN_KEY);
  }

  function askToken(reason) {
    const form = document.getElementById("login");
    document.getElementById("main").hidden = true;
    form.hidden = false;
    if (reason) status(reason, true);
    form.onsubmit = (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
      location.reload();
    };
  }

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(path) {
    const response = await fetch(path, { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
    let body = null;
    try { body = await response.json(); } catch (e) { body = { error: response.statusText }; }
    if (!response.ok) throw new ApiError(response.status, (body && body.error) || response.statusText);
    return body;
  }

  const number = (x, digits) => (x === null || x === undefined) ? "-" : Number(x).toPrecision(digits || 4);
  const when = (ms) => new Date(ms).toISOString().replace("T", " ").replace(/\.000Z$/, "Z");
  // a tick of a time axis, UTC and 24-hour: the date, or the time of day (with the date when the range spans days)
  function tick(seconds, increment, span) {
    const iso = new Date(seconds * 1000).toISOString();
    if (increment >= 86400) return iso.slice(0, 10);
    const time = increment < 60 ? iso.slice(11, 19) : iso.slice(11, 16);
    return span > 86400 ? iso.slice(5, 10) + " " + time : time;
  }
  const timeAxis = { values: (u, splits, axis, space, increment) =>
    splits.map((s) => tick(s, increment, u.scales.x.max - u.scales.x.min)), size: 40 };
  const utc = (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC");

  function facts(pairs) {
    return el("dl", { class: "facts" }, ...pairs.map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {}, v))));
  }

  function domainOf(a) {
    if (a.values) return a.values.join(", ");
    if (a.keys) return "keys " + a.keys.join(", ") + " in [" + a.range.join(", ") + "]";
    if (a.range) return "[" + a.range.join(", ") + "]";
    if (a.max_length) return "strings up to " + a.max_length + " bytes, top " + a.top;
    return "";
  }

  // ---- the catalogue -------------------------------------------------------------------------------------------
  async function catalogue() {
    const [{ collections }, { jobs }] = await Promise.all([api("/collections"), api("/jobs")]);
    jobCatalogue(jobs);
    const root = document.getElementById("catalogue");
    root.replaceChildren();
    if (!collections.length) root.append(el("p", { class: "muted" }, "No collection is published yet (ldp spec publish)."));
    for (const c of collections) {
      const v = c.versions[c.versions.length - 1];
      const link = el("a", { href: "/console/collection?name=" + encodeURIComponent(c.name) }, c.name);
      const lifetime = v.privacy.lifetime === null ? "none (T reports cost T x eps)" : number(v.privacy.lifetime);
      const rows = v.attributes.map((a) => el("tr", {}, el("td", {}, a.name), el("td", {}, a.type),
        el("td", {}, a.description || ""), el("td", {}, a.unit || ""), el("td", {}, a.mechanism),
        el("td", {}, domainOf(a))));
      root.append(el("section", { class: "card", "data-collection": c.name },
        el("h2", {}, link), el("p", { class: "muted" }, v.description || ""),
        facts([["version", v.version + (c.versions.length > 1 ? " (of " + c.versions.length + ")" : "")],
          ["eps per report", number(v.privacy.per_report)], ["lifetime budget", lifetime],
          ["devices (all time)", v.reports.toLocaleString("en")],
          ["accepted / rejected", c.reports.accepted.toLocaleString("en") + " / " +
            Object.values(c.reports.rejected).reduce((s, n) => s + n, 0).toLocaleString("en")],
          ["windows", v.windows.join(", ") + " (" + v.windows_with_data.length + " with data)"],
          ["shuffled", v.shuffle ? "yes, delta " + v.shuffle.delta : "no"]]),
        el("table", {}, el("thead", {}, el("tr", {}, ...["attribute", "type", "description", "unit", "mechanism",
          "domain"].map((h) => el("th", {}, h)))), el("tbody", {}, ...rows))));
    }
    state.collections = collections.length;
  }

  const accuracyText = (s) => s.accuracy === null ? "not evaluated" : number(s.accuracy, 3) +
    (s.accuracy_stderr === null || s.accuracy_stderr === undefined ? "" : " \u00b1 " + number(1.96 * s.accuracy_stderr, 2));
  const refusedCount = (s) => Object.values(s.refused).reduce((t, n) => t + n, 0);

  function jobCatalogue(jobs) {
    const root = document.getElementById("jobs");
    root.replaceChildren();
    if (!jobs.length) root.append(el("p", { class: "muted" }, "No training job is published yet (ldp train publish JOB.yaml)."));
    for (const j of jobs) {
      const s = j.status;
      const link = el("a", { href: "/console/job?name=" + encodeURIComponent(j.job) }, j.job);
      root.append(el("section", { class: "card", "data-job": j.job }, el("h2", {}, link),
        facts([["job version", j.job_version + (j.versions.length > 1 ? " (of " + j.versions.length + ")" : "")],
          ["model", j.model.architecture + " " + j.model.dims.join("\u00d7") + " (" + j.parameters.toLocaleString("en") + " parameters)"],
          ["mechanism", j.mechanism], ["eps per report", number(j.epsilon_per_report)],
          ["lifetime bound", number(j.lifetime_epsilon_bound) + " (" + j.max_rounds + " rounds)"],
          ["model version", s ? s.version + " of " + j.max_versions + (s.done ? " (done)" : "") : "no coordinator yet"],
          ["held-out accuracy", s ? accuracyText(s) : "-"],
          ["accepted / refused", s ? s.updates_accepted.toLocaleString("en") + " / " + refusedCount(s).toLocaleString("en") : "-"]])));
    }
    state.jobs = jobs.length;
  }

  // ---- a collection's page ---------------------------------------------------------------------------------------
  const page = { name: null, version: null, charts: {}, densities: {} };

  // The labelled lines of a series: [{label, group, points: [point per window]}], at most MAX_LINES of them.
  function lines(doc) {
    if (!doc.windows.length) return [];
    const groups = Object.keys(doc.windows[doc.windows.length - 1].estimates);
    const out = [];
    for (const group of groups) {
      if (group === "mean") { out.push({ label: "mean", group, pick: (w) => w.estimates.mean }); continue; }
      const labels = new Set();
      for (const w of doc.windows) for (const label of Object.keys(w.estimates[group] || {})) labels.add(label);
      const newest = doc.windows[doc.windows.length - 1].estimates[group] || {};
      const ranked = [...labels].sort((a, b) => ((newest[b] || {}).estimate || 0) - ((newest[a] || {}).estimate || 0));
      for (const label of ranked) {
        out.push({ label: group === "means" ? label + " mean" : label, group,
          pick: (w) => (w.estimates[group] || {})[label] || null });
      }
    }
    return out.slice(0, MAX_LINES);
  }

  function chartData(doc, shown) {
    const xs = doc.windows.map((w) => w.start_ms / 1000);
    const data = [xs];
    for (const line of shown) {
      for (const key of ["estimate", "low", "high"]) {
        data.push(doc.windows.map((w) => { const p = line.pick(w); return p ? p[key] : null; }));
      }
    }
    return data;
  }

  // A shade over the windows still open (their figures partial), labelled.
  function shadePartial(name) {
    return (u) => {
      const starts = state.partial[name] || [];
      if (!starts.length) return;
      const ctx = u.ctx;
      const ratio = window.devicePixelRatio || 1;
      const left = Math.max(u.bbox.left, Math.round(u.valToPos(Math.min(...starts) / 1000, "x", true)) - 4 * ratio);
      ctx.save();
      ctx.fillStyle = "rgba(230, 140, 0, 0.12)";
      ctx.fillRect(left, u.bbox.top, u.bbox.left + u.bbox.width - left, u.bbox.height);
      ctx.fillStyle = "#b35c00";
      ctx.font = (11 * ratio) + "px system-ui, sans-serif";
      ctx.textAlign = "right";
      ctx.fillText("partial", u.bbox.left + u.bbox.width - 4 * ratio, u.bbox.top + 12 * ratio);
      ctx.restore();
    };
  }

  // uPlot's series and bands of labelled lines after the x series, each line with its 95% band (three series:
  // value, low, high; `first` picks the first line's color).
  function bandedLines(labels, first) {
    const series = [];
    const bands = [];
    labels.forEach((label, i) => {
      const color = COLORS[(i + (first || 0)) % COLORS.length];
      series.push({ label, stroke: color, width: 2, points: { size: 5 } });
      series.push({ label: label + " low", stroke: color, width: 0.5, dash: [3, 3], points: { show: false } });
      series.push({ label: label + " high", stroke: color, width: 0.5, dash: [3, 3], points: { show: false } });
      bands.push({ series: [3 * i + 3, 3 * i + 2], fill: color + "22" });
    });
    return { series, bands };
  }

  // The band's edges stay out of the legend (its rows: x, then value, low, high per line).
  function hideBandEdges(plot) {
    plot.root.querySelectorAll(".u-legend .u-series").forEach((row, i) => { if (i > 0 && i % 3 !== 1) row.hidden = true; });
  }

  function chartOptions(name, doc, shown, width) {
    const { series, bands } = bandedLines(shown.map((line) => line.label));
    series.unshift({ value: (u, v) => v === null || v === undefined ? "-" : when(v * 1000) });
    const unit = doc.unit ? " (" + doc.unit + ")" : "";
    const yLabel = shown.length && shown[0].group === "mean" ? "mean" + unit : "frequency";
    return { width, height: HEIGHT, series, bands, scales: { x: { time: true } }, tzDate: utc,
      axes: [timeAxis, { label: yLabel, size: 60 }], hooks: { draw: [shadePartial(name)] }, legend: { live: true } };
  }

  function drawChart(name, doc, holder, note) {
    const open = doc.windows.filter((w) => w.end_ms > page.now);
    state.partial[name] = open.map((w) => w.start_ms);
    note.textContent = open.length ? "The window from " + when(open[0].start_ms) + " is still open: its figures " +
      "are partial." : "";
    note.hidden = !open.length;
    const shown = lines(doc);
    const signature = shown.map((l) => l.label).join("\u0000");
    const data = chartData(doc, shown);
    const existing = page.charts[name];
    if (existing && existing.signature === signature) {
      existing.plot.setData(data);
    } else {
      if (existing) existing.plot.destroy();
      holder.replaceChildren();
      if (!shown.length) {
        holder.append(el("p", { class: "note" }, "No window with reports in this range yet."));
        delete page.charts[name];
      } else {
        const plot = new uPlot(chartOptions(name, doc, shown, Math.max(280, holder.clientWidth || 600)), data, holder);
        hideBandEdges(plot);
        page.charts[name] = { plot, signature };
      }
    }
    state.points[name] = doc.windows.length;
  }

  // A histogram of the newest window with reports: a categorical attribute's frequencies (a string attribute's heavy
  // hitters, a key-value attribute's key frequencies) with their 95% intervals. A numeric attribute's distribution is
  // drawn by `drawDistribution` below.
  function histogramRows(doc) {
    for (let i = doc.windows.length - 1; i >= 0; i--) {
      const w = doc.windows[i];
      if (w.reports > 0 && w.estimates.frequencies) return { window: w, rows: Object.entries(w.estimates.frequencies) };
    }
    return null;
  }

  function drawHistogram(doc, holder) {
    holder.replaceChildren();
    const found = histogramRows(doc);
    if (!found) return;
    const top = Math.max(1e-9, ...found.rows.map(([, p]) => Math.max(p.high || 0, p.estimate || 0)));
    const pct = (x) => (100 * Math.min(Math.max(x || 0, 0), top) / top).toFixed(2) + "%";
    const open = found.window.end_ms > page.now;
    holder.append(el("div", { class: "note" }, "Window from " + when(found.window.start_ms) +
      (open ? " (open: partial)" : "") + ": " + found.window.sampled.toLocaleString("en") +
      " reports of this attribute, 95% intervals"));
    for (const [label, p] of found.rows) {
      const bar = el("div", { class: "bar" });
      bar.style.width = pct(p.estimate);
      const whisker = el("div", { class: "whisker" });
      whisker.style.left = pct(p.low);
      whisker.style.width = "calc(" + pct(p.high) + " - " + pct(p.low) + ")";
      holder.append(el("div", { class: "bar-row", "data-label": label }, el("span", { class: "label", title: label }, label),
        el("div", { class: "bar-track" }, bar, whisker),
        el("span", { class: "value" }, number(p.estimate, 3) + " \u00b1 " + number(p.stderr && 1.96 * p.stderr, 2))));
    }
  }

  // A numeric attribute's distribution in the newest window with data: its density as steps over the grid (left
  // axis, per unit of the attribute), its CDF with a 95% band (right axis), and a dashed mark at each quantile of MARKS.
  function densityData(dist) {
    const band = (sign) => dist.cdf.map((f, i) => (f === null || dist.cdf_stderr[i] === null) ? null :
      Math.min(1, Math.max(0, f + sign * 1.96 * dist.cdf_stderr[i])));
    return [dist.grid, [...dist.density, dist.density[dist.density.length - 1]], dist.cdf, band(-1), band(1)];
  }

  function markQuantiles(name) {
    return (u) => {
      const shown = page.densities[name];
      if (!shown || !shown.quantiles) return;
      const ctx = u.ctx;
      const ratio = window.devicePixelRatio || 1;
      ctx.save();
      ctx.font = (11 * ratio) + "px system-ui, sans-serif";
      MARKS.forEach(([level, label], i) => {
        const q = shown.quantiles[level];
        if (!q || q.estimate === null) return;
        const x = Math.round(u.valToPos(q.estimate, "x", true));
        ctx.strokeStyle = ctx.fillStyle = COLORS[(i + 3) % COLORS.length];
        ctx.lineWidth = 1.5 * ratio;
        ctx.setLineDash([5 * ratio, 4 * ratio]);
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
        ctx.fillText(label, x + 4 * ratio, u.bbox.top + (14 + 13 * i) * ratio);
      });
      ctx.restore();
    };
  }

  function densityOptions(name, a, width) {
    const unit = a.unit ? " (" + a.unit + ")" : "";
    return { width, height: HEIGHT, scales: { x: { time: false }, cdf: { range: [0, 1] } },
      series: [{ label: a.name + unit },
        { label: "density", stroke: COLORS[0], fill: COLORS[0] + "33", width: 1.5, scale: "y",
          paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } },
        { label: "CDF", stroke: COLORS[1], width: 2, scale: "cdf", points: { show: false } },
        { label: "CDF low", stroke: COLORS[1], width: 0.5, dash: [3, 3], scale: "cdf", points: { show: false } },
        { label: "CDF high", stroke: COLORS[1], width: 0.5, dash: [3, 3], scale: "cdf", points: { show: false } }],
      bands: [{ series: [4, 3], fill: COLORS[1] + "22" }],
      axes: [{ label: a.name + unit }, { label: "density", size: 70, scale: "y" },
        { label: "CDF", side: 1, scale: "cdf", size: 50, grid: { show: false } }],
      hooks: { draw: [markQuantiles(name)] }, legend: { live: true } };
  }

  function drawDistribution(a, doc, holder) {
    state.distributions[a.name] = doc;
    const dist = doc.distribution;
    const existing = page.densities[a.name];
    if (!dist) {
      if (existing) existing.plot.destroy();
      delete page.densities[a.name];
      holder.replaceChildren(el("p", { class: "note" }, "Distribution: no report of this attribute in the newest " +
        "window yet."));
      return;
    }
    const signature = dist.grid.length + ":" + dist.grid[0] + ":" + dist.grid[dist.grid.length - 1];
    const unit = a.unit ? " " + a.unit : "";
    const marks = MARKS.filter(([level]) => dist.quantiles[level]).map(([level, label]) => {
      const q = dist.quantiles[level];
      const half = q.stderr === null ? "" : " \u00b1 " + String(Number((1.96 * q.stderr).toPrecision(2)));
      return label + " " + String(Number(Number(q.estimate).toPrecision(4))) + half + unit;
    });
    const open = doc.window !== "all" && doc.window_start_ms + page.windowMs[doc.window.split(":")[0]] > page.now;
    const note = "Distribution in the window " + (doc.window === "all" ? "all time" : "from " +
      when(doc.window_start_ms)) + (open ? " (open: partial)" : "") + " (" + dist.method + ", " + Math.round(dist.reports).toLocaleString("en") + " reports): " +
      marks.join(", ") + " (95% intervals)";
    if (existing && existing.signature === signature) {
      existing.quantiles = dist.quantiles;
      existing.note.textContent = note;
      existing.plot.setData(densityData(dist));
      return;
    }
    if (existing) existing.plot.destroy();
    const text = el("div", { class: "note" }, note);
    const chart = el("div", { class: "density" });
    holder.replaceChildren(text, chart);
    page.densities[a.name] = { signature, quantiles: dist.quantiles, note: text, plot: null };
    const plot = new uPlot(densityOptions(a.name, a, Math.max(280, holder.clientWidth || 600)), densityData(dist),
      chart);
    page.densities[a.name].plot = plot;
    // the band's edges stay out of the legend
    plot.root.querySelectorAll(".u-legend .u-series").forEach((row, i) => { if (i >= 3) row.hidden = true; });
  }

  function distributionQuery(a) {
    return "/collections/" + encodeURIComponent(page.name) + "/distribution?attribute=" + encodeURIComponent(a.name) +
      "&window=" + encodeURIComponent(document.getElementById("window").value) + "&version=" + page.version +
      "&quantiles=" + MARKS.map(([level]) => level).join(",");
  }

  const hasDistribution = (a) => a.type === "numeric" && DISTRIBUTION_MECHANISMS.includes(a.mechanism);

  function drawPrivacy(doc) {
    const root = document.getElementById("privacy");
    const recent = doc.windows.slice(-6).reverse();
    const shuffled = doc.privacy.shuffled !== null;
    const head = ["window start (UTC)", "reports", "eps per report", ...(shuffled ? ["central eps (delta)", "batches"] : [])];
    const rows = recent.map((w) => el("tr", w.end_ms > page.now ? { class: "partial" } : {},
      el("td", {}, when(w.start_ms) + (w.end_ms > page.now ? " (open: partial)" : "")),
      el("td", {}, w.reports.toLocaleString("en")),
      el("td", {}, number(w.privacy.epsilon)),
      ...(shuffled ? [el("td", {}, w.privacy.central ? number(w.privacy.central.epsilon) + " (" + w.privacy.central.delta + ")" : "not released"),
        el("td", {}, w.privacy.central ? w.privacy.central.batches : 0)] : [])));
    root.replaceChildren(el("div", { class: "card" }, el("h2", {}, "Windows and privacy"),
      facts([["eps per report", number(doc.privacy.per_report)],
        ["lifetime budget", doc.privacy.lifetime === null ? "none" : number(doc.privacy.lifetime)],
        ["shuffled", shuffled ? "delta " + doc.privacy.shuffled.delta : "no"]]),
      el("table", {}, el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))), el("tbody", {}, ...rows))));
  }

  // The time range picked: {from, to} in ms, `to` exclusive (the last N windows, a duration back from now, or the
  // from/to fields read as UTC).
  function timeRange(now) {
    const choice = document.getElementById("range").value;
    const length = page.windowMs[document.getElementById("window").value];
    if (choice === "custom") {
      const from = Date.parse(document.getElementById("from").value + "Z");
      const to = Date.parse(document.getElementById("to").value + "Z");
      if (!(from < to)) throw new ApiError(400, "pick a range whose start (UTC) is before its end");
      return { from, to };
    }
    const to = now + 1;
    if (choice.endsWith("w")) return { from: (Math.ceil(to / length) - Number(choice.slice(0, -1))) * length, to };
    return { from: Math.floor((to - DURATIONS[choice]) / length) * length, to };
  }

  // Presets that would span more windows than a series may hold are offered only with a longer window.
  function fitRanges() {
    const select = document.getElementById("range");
    const length = page.windowMs[document.getElementById("window").value];
    for (const option of select.options) {
      option.disabled = option.value in DURATIONS && DURATIONS[option.value] / length > MAX_WINDOWS;
    }
    if (select.selectedOptions[0].disabled) select.value = "48w";
  }

  function pickRange() {
    const custom = document.getElementById("range").value === "custom";
    const fields = document.getElementById("custom");
    if (custom && fields.hidden && state.range) {
      const iso = (ms) => new Date(ms).toISOString().slice(0, 19);
      document.getElementById("from").value = iso(state.range.from);
      document.getElementById("to").value = iso(state.range.to);
    }
    fields.hidden = !custom;
  }

  function query(attribute) {
    return "/collections/" + encodeURIComponent(page.name) + "/series?attribute=" + encodeURIComponent(attribute) +
      "&window=" + encodeURIComponent(document.getElementById("window").value) + "&version=" + page.version +
      "&from=" + state.range.from + "&to=" + state.range.to;
  }

  async function refresh() {
    page.now = Date.now();
    state.range = timeRange(page.now);
    const withDistribution = page.attributes.filter(hasDistribution);
    const [docs, dists] = await Promise.all([Promise.all(page.attributes.map((a) => api(query(a.name)))),
      Promise.all(withDistribution.map((a) => api(distributionQuery(a))))]);
    docs.forEach((doc, i) => {
      const a = page.attributes[i];
      state.series[a.name] = doc;
      drawChart(a.name, doc, document.getElementById("chart-" + i), document.getElementById("partial-" + i));
      drawHistogram(doc, document.getElementById("histogram-" + i));
    });
    dists.forEach((doc, i) => {
      const a = withDistribution[i];
      drawDistribution(a, doc, document.getElementById("distribution-" + page.attributes.indexOf(a)));
    });
    if (docs.length) drawPrivacy(docs[0]);
    state.renderedAt = page.now;
    state.refreshes += 1;
    status("updated " + when(page.now).slice(11, 19) + " (UTC), every " + REFRESH_MS / 1000 + " s");
  }

  async function collectionPage() {
    page.name = new URLSearchParams(location.search).get("name") || "";
    const { collections } = await api("/collections");
    const c = collections.find((x) => x.name === page.name);
    if (!c) { missing(COLLECTION_PAGES, page.name, collections.map((x) => x.name)); return; }
    const v = c.versions[c.versions.length - 1];
    page.version = v.version;
    page.attributes = v.attributes;
    document.title = "ldpstream console: " + c.name;
    document.getElementById("title").textContent = c.name + " v" + v.version;
    document.getElementById("description").textContent = v.description || "";
    const select = document.getElementById("window");
    const lengths = v.windows.filter((w) => w !== "all");
    if (!lengths.length) throw new ApiError(400, c.name + " keeps only the all-time window: it has no series");
    page.windowMs = Object.fromEntries(lengths.map((w) => [w, Number(w.slice(0, -1)) *
      { s: 1000, m: 60000, h: 3600000, d: 86400000 }[w.slice(-1)]]));
    select.replaceChildren(...lengths.map((w) => el("option", { value: w }, w)));
    const root = document.getElementById("attributes");
    root.replaceChildren(...v.attributes.map((a, i) => el("section", { class: "card", "data-attribute": a.name },
      el("h3", {}, a.name + (a.unit ? " (" + a.unit + ")" : "")),
      el("p", { class: "muted" }, [a.description, a.type, a.mechanism, domainOf(a)].filter(Boolean).join(" \u00b7 ")),
      el("div", { class: "chart", id: "chart-" + i }), el("p", { class: "partial-note", id: "partial-" + i, hidden: "" }),
      el("div", { class: "histogram", id: "histogram-" + i }),
      hasDistribution(a) ? el("div", { class: "distribution", id: "distribution-" + i }) : null)));
    const redraw = () => refresh().catch(failed);
    document.getElementById("window").onchange = () => { fitRanges(); redraw(); };
    document.getElementById("range").onchange = () => { pickRange(); redraw(); };
    document.getElementById("apply").onclick = redraw;
    fitRanges();
    resizeCharts();
    await refresh();
    setInterval(() => refresh().catch(failed), REFRESH_MS);
  }

  // Charts follow the window's width.
  function resizeCharts() {
    window.addEventListener("resize", () => {
      for (const shown of [...Object.values(page.charts), ...Object.values(page.densities)]) {
        const holder = shown.plot.root.parentElement;
        if (holder) shown.plot.setSize({ width: Math.max(280, holder.clientWidth), height: HEIGHT });
      }
    });
  }

  // ---- a training job's page -------------------------------------------------------------------------------------
  // Its curves: held-out accuracy and loss per model version, each with its 95% band (1.96 standard errors).
  const CURVES = [["accuracy", "held-out accuracy"], ["loss", "held-out loss (mean cross-entropy)"]];
  const VERSION_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 1e4, 2e4, 5e4, 1e5]; // whole versions

  function curveData(curve, key) {
    const se = (p) => p[key + "_stderr"] === undefined || p[key + "_stderr"] === null ? 0 : 1.96 * p[key + "_stderr"];
    return [curve.map((p) => p.version), curve.map((p) => p[key]), curve.map((p) => p[key] - se(p)),
      curve.map((p) => p[key] + se(p))];
  }

  function drawCurve(key, label, curve, holder, i) {
    const existing = page.charts[key];
    if (existing) { existing.plot.setData(curveData(curve, key)); return; }
    if (!curve.length) {
      holder.replaceChildren(el("p", { class: "note" }, "No evaluated version yet (the coordinator evaluates each " +
        "version when the job's file has an evaluation section)."));
      return;
    }
    holder.replaceChildren();
    const { series, bands } = bandedLines([label], i);
    series.unshift({ label: "model version", value: (u, v) => v === null || v === undefined ? "-" : String(v) });
    const plot = new uPlot({ width: Math.max(280, holder.clientWidth || 600), height: HEIGHT, series, bands,
      scales: { x: { time: false } }, axes: [{ label: "model version", incrs: VERSION_STEPS, values: (u, splits) =>
        splits.map(String) }, { label: key, size: 60 }],
      legend: { live: true } }, curveData(curve, key), holder);
    hideBandEdges(plot);
    page.charts[key] = { plot, signature: key };
  }

  function drawJob(doc) {
    state.job = doc;
    document.getElementById("title").textContent = doc.job + " (job version " + doc.job_version + ")";
    const lifetime = number(doc.lifetime_epsilon) + " (bound " + number(doc.lifetime_epsilon_bound) + " at " +
      doc.max_rounds + " rounds)";
    document.getElementById("facts").replaceChildren(el("div", { class: "card" }, el("h2", {}, "Model and privacy"),
      facts([["model version", doc.version + (doc.done ? " (done)" : "")],
        ["model", doc.model.architecture + " " + doc.model.dims.join("\u00d7")], ["mechanism", doc.mechanism],
        ["held-out accuracy", accuracyText(doc)],
        ["held-out loss", doc.loss === null ? "not evaluated" : number(doc.loss, 4) + (doc.loss_stderr === null ? "" :
          " \u00b1 " + number(1.96 * doc.loss_stderr, 2))],
        ["updates this version", doc.updates_in_version + " of " + doc.batch_size],
        ["eps per report", number(doc.epsilon_per_report)],
        ["central eps (shuffled)", doc.central_epsilon == null ? "not shuffled" :
          number(doc.central_epsilon) + " at \u03b4 " + number(doc.delta, 2) + " per version"],
        ["most participations", doc.max_participations === null ? "not seen (shuffled)" : doc.max_participations],
        ["lifetime eps", lifetime]])));
    CURVES.forEach(([key, label], i) => {
      drawCurve(key, label, doc.curve, document.getElementById("curve-" + key), i);
      state.points[key] = doc.curve.length;
    });
    const reasons = Object.entries(doc.refused);
    document.getElementById("updates").replaceChildren(el("div", { class: "card" }, el("h2", {}, "Updates"),
      el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "outcome"), el("th", {}, "updates"))),
        el("tbody", {}, el("tr", { "data-outcome": "accepted" }, el("td", {}, "accepted"),
          el("td", {}, doc.updates_accepted.toLocaleString("en"))),
        ...reasons.map(([reason, n]) => el("tr", { "data-outcome": "refused:" + reason },
          el("td", {}, "refused: " + reason), el("td", {}, n.toLocaleString("en"))))))));
  }

  async function refreshJob() {
    drawJob(await api("/jobs/" + encodeURIComponent(page.name)));
    state.refreshes += 1;
    status("updated " + when(Date.now()).slice(11, 19) + " (UTC), every " + REFRESH_MS / 1000 + " s");
  }

  async function jobPage() {
    page.name = new URLSearchParams(location.search).get("name") || "";
    const { jobs } = await api("/jobs");
    const j = jobs.find((x) => x.job === page.name);
    if (!j || !j.status) {
      missing(JOB_PAGES, page.name, jobs.map((x) => x.job), j ? "It is published (job version " + j.job_version +
        ") but no coordinator has run it yet: ldp train run " + j.job + "." : "");
      return;
    }
    document.title = "ldpstream console: " + page.name;
    resizeCharts();
    drawJob(j.status);
    await refreshJob();
    setInterval(() => refreshJob().catch(failed), REFRESH_MS);
  }

  // Edit distance of two names (a missing collection's suggestions).
  function distance(a, b) {
    let row = Array.from({ length: b.length + 1 }, (_, j) => j);
    for (let i = 1; i <= a.length; i++) {
      const next = [i];
      for (let j = 1; j <= b.length; j++) {
        next.push(Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1)));
      }
      row = next;
    }
    return row[b.length];
  }

  // What a missing page names: a collection or a training job, the page of one, and how to publish one.
  const COLLECTION_PAGES = { noun: "collection", plural: "collections", page: "/console/collection",
    publish: "ldp spec publish FILE" };
  const JOB_PAGES = { noun: "training job", plural: "training jobs", page: "/console/job",
    publish: "ldp train publish JOB.yaml" };

  // The page of a collection or job that is not published here (or, `detail`, not running): what was asked, the
  // nearest names, every published one.
  function missing(kind, name, names, detail) {
    state.missing = name;
    const published = names.includes(name); // a job published that no coordinator runs yet
    document.title = "ldpstream console: " + (published ? name : "no " + kind.noun + " " + name);
    document.getElementById("main").hidden = true;
    const root = document.getElementById("missing");
    root.hidden = false;
    const link = (n) => el("a", { href: kind.page + "?name=" + encodeURIComponent(n) }, n);
    const near = names.filter((n) => n.startsWith(name) || name.startsWith(n) ||
      distance(n, name) <= Math.max(2, name.length / 3)).sort((a, b) => distance(a, name) - distance(b, name));
    const list = (items) => items.flatMap((n, i) => i ? [", ", link(n)] : [link(n)]);
    root.replaceChildren(el("section", { class: "card" },
      el("h1", {}, published ? name + ": no coordinator yet" : name ? "No " + kind.noun + " named \u201c" + name + "\u201d" :
        "No " + kind.noun + " named in the address"),
      el("p", {}, published ? detail : name ? "Nothing of that name is published on this server." :
        "The address names no " + kind.noun + ": " + kind.page + "?name=NAME."),
      near.length && !published ? el("p", { class: "suggest" }, "Did you mean ", ...list(near.slice(0, 5)), "?") : null,
      el("p", {}, ...(names.length ? ["Published here: ", ...list(names)] :
        ["No " + kind.noun + " is published yet: publish one with ", el("code", {}, kind.publish), "."])),
      el("p", {}, el("a", { href: "/console/" }, "All " + kind.plural))));
    status(published ? detail : "no published " + kind.noun + " " + JSON.stringify(name));
  }

  function failed(error) {
    if (error instanceof ApiError && (error.status === 401 || error.status === 403)) {
      sessionStorage.removeItem(TOKEN_KEY);
      askToken("The token was refused (" + error.status + "): " + error.message);
      return;
    }
    status(error.message || String(error), true);
  }

  async function main() {
    token = takeToken();
    if (!token) { askToken(); return; }
    const kind = document.body.dataset.page;
    await (kind === "collection" ? collectionPage() : kind === "job" ? jobPage() : catalogue());
    state.ready = true;
    document.body.dataset.ready = "1";
  }

  main().catch(failed);
})();
