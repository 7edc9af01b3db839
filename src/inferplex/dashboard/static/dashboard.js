// inferplex live dashboard: polls /dashboard/data once a second and draws on <canvas>.
// No libraries and no network beyond this server.
"use strict";

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
  "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];
const POLL_MS = 1000;
let updates = 0;

function fmtBytes(value) {
  if (value === null || value === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (value >= 1024 && i < units.length - 1) { value /= 1024; i += 1; }
  return `${value.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function fmtNum(value, digits = 1) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
}

function fmtPct(value) {
  return value === null || value === undefined ? "–" : `${(value * 100).toFixed(0)}%`;
}

function last(values) {
  for (let i = values.length - 1; i >= 0; i -= 1) if (values[i] !== null) return values[i];
  return null;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(value));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * step >= value) return m * step;
  return 10 * step;
}

// One row per served model version, with its colour.
function versionRows(data) {
  const rows = [];
  for (const model of data.models) {
    for (const version of model.versions) {
      rows.push({
        label: `${model.name}/${version.version}`, model, version,
        colour: PALETTE[rows.length % PALETTE.length],
      });
    }
  }
  return rows;
}

function prepare(canvas) {
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.font = "11px system-ui, sans-serif";
  return ctx;
}

function timeAxis(ctx, times, left, right, bottom) {
  ctx.fillStyle = "#4a5562";
  if (!times.length) return;
  const span = Math.max(times[times.length - 1] - times[0], 1);
  for (let k = 0; k <= 4; k += 1) {
    const x = left + ((right - left) * k) / 4;
    const ago = Math.round(span * (1 - k / 4));
    // the end labels stay inside the canvas
    ctx.textAlign = k === 0 ? "left" : k === 4 ? "right" : "center";
    ctx.fillText(ago ? `-${ago}s` : "now", x, bottom + 14);
  }
}

function lineChart(canvas, times, series) {
  const ctx = prepare(canvas);
  const left = 46, right = canvas.width - 8, top = 8, bottom = canvas.height - 20;
  const all = series.flatMap((s) => s.values.filter((v) => v !== null));
  const max = niceMax(Math.max(0, ...all));
  ctx.strokeStyle = "#e3e6ea";
  ctx.fillStyle = "#4a5562";
  ctx.textAlign = "right";
  ctx.lineWidth = 1;
  for (let k = 0; k <= 5; k += 1) {
    const y = bottom - ((bottom - top) * k) / 5;
    ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(right, y); ctx.stroke();
    ctx.fillText(fmtNum((max * k) / 5, max < 5 ? 2 : 0), left - 4, y + 4);
  }
  timeAxis(ctx, times, left, right, bottom);
  const first = times[0], span = Math.max(times[times.length - 1] - first, 1);
  let drawn = 0;
  for (const s of series) {
    ctx.strokeStyle = s.colour;
    ctx.lineWidth = 2;
    ctx.beginPath();
    let pen = false;
    s.values.forEach((value, i) => {
      if (value === null) { pen = false; return; }
      const x = left + ((times[i] - first) / span) * (right - left);
      const y = bottom - (value / max) * (bottom - top);
      if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      pen = true;
      drawn += 1;
    });
    ctx.stroke();
  }
  canvas.dataset.series = String(series.length);
  canvas.dataset.points = String(drawn);
}

// rows: [{label, values: [0..1 or null]}]; darker = larger share. The colour follows the
// square root of the share, so that a few percent still shows.
function heatmap(canvas, times, rows, emptyText) {
  const ctx = prepare(canvas);
  const left = 110, right = canvas.width - 8, top = 4, bottom = canvas.height - 20;
  const measured = rows.some((r) => r.values.some((v) => v !== null));
  canvas.dataset.rows = String(rows.length);
  canvas.dataset.cells = "0";
  if (!rows.length || !times.length || !measured) {
    ctx.fillStyle = "#7a8491";
    ctx.textAlign = "center";
    ctx.fillText(emptyText, canvas.width / 2, canvas.height / 2);
    return;
  }
  const h = (bottom - top) / rows.length, w = (right - left) / times.length;
  let cells = 0;
  rows.forEach((row, r) => {
    ctx.fillStyle = "#1d232b";
    ctx.textAlign = "right";
    ctx.fillText(row.label.slice(0, 18), left - 4, top + h * r + h / 2 + 4);
    row.values.forEach((value, i) => {
      if (value === null) ctx.fillStyle = "#eceef1";
      else ctx.fillStyle = `hsl(214, 70%, ${Math.round(96 - 66 * Math.sqrt(Math.min(Math.max(value, 0), 1)))}%)`;
      ctx.fillRect(left + w * i, top + h * r, Math.ceil(w), Math.max(h - 1, 1));
      cells += 1;
    });
  });
  timeAxis(ctx, times, left, right, bottom);
  canvas.dataset.cells = String(cells);
}

function memoryShares(rows, count) {
  const shares = rows.map(() => new Array(count).fill(null));
  for (let i = 0; i < count; i += 1) {
    let total = 0;
    for (const row of rows) total += row.version.series.memory[i] || 0;
    if (!total) continue;
    rows.forEach((row, r) => {
      const bytes = row.version.series.memory[i];
      shares[r][i] = bytes === null ? null : bytes / total;
    });
  }
  return shares;
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function renderTable(data) {
  const body = document.querySelector("#models tbody");
  const trs = [];
  for (const model of data.models) {
    const versions = model.versions.length ? model.versions : [null];
    for (const version of versions) {
      const tr = document.createElement("tr");
      tr.dataset.model = model.name;
      tr.title = model.reason || "";
      const s = version ? version.series : null;
      tr.append(
        cell(model.name), cell(version ? version.version : "–"),
        cell(model.state, `state-${model.state}`),
        cell(version ? String(version.instances) : "–"),
        cell(version ? String(version.queue) : "–"),
        cell(s ? fmtNum(last(s.throughput)) : "–"),
        cell(s ? fmtNum(last(s.p50_ms), 2) : "–"),
        cell(s ? fmtNum(last(s.p99_ms), 2) : "–"),
        cell(s ? fmtPct(last(s.busy)) : "–"),
        cell(s ? fmtBytes(last(s.memory)) : "–"),
      );
      trs.push(tr);
    }
  }
  body.replaceChildren(...trs);
}

// generated tokens at the previous poll, by "model/version": the tokens/s between polls
const previousTokens = new Map();

function renderLlm(data) {
  const trs = [];
  const now = performance.now();
  for (const model of data.models) {
    for (const version of model.versions) {
      const llm = version.llm;
      if (!llm) continue;
      const key = `${model.name}/${version.version}`;
      const before = previousTokens.get(key);
      previousTokens.set(key, { tokens: llm.generated_tokens, at: now });
      const rate = before && now > before.at && llm.generated_tokens >= before.tokens
        ? (llm.generated_tokens - before.tokens) / ((now - before.at) / 1000) : null;
      const tr = document.createElement("tr");
      tr.append(
        cell(model.name), cell(version.version),
        cell(String(llm.running)), cell(String(llm.waiting)),
        cell(`${llm.kv_blocks_used} / ${llm.kv_blocks_total}`),
        cell(fmtPct(llm.prefix_hit_rate)), cell(String(llm.preemptions)),
        cell(fmtNum(rate)),
        cell(`${fmtNum(llm.ttft_p50_ms, 1)} / ${fmtNum(llm.ttft_p99_ms, 1)}`),
        cell(`${fmtNum(llm.itl_p50_ms, 1)} / ${fmtNum(llm.itl_p99_ms, 1)}`),
      );
      trs.push(tr);
    }
  }
  document.getElementById("llm-section").hidden = !trs.length;
  document.querySelector("#llm tbody").replaceChildren(...trs);
}

// the OpenAI API's figures per model (TTFT, ITL: the upper bound of the bucket)
function renderGeneration(data) {
  const rows = data.generation || [];
  document.getElementById("generation-section").hidden = !rows.length;
  const trs = rows.map((g) => {
    const tr = document.createElement("tr");
    tr.dataset.model = g.model;
    tr.append(
      cell(g.model), cell(String(g.requests)), cell(String(g.prompt_tokens)),
      cell(String(g.completion_tokens)), cell(fmtNum(g.ttft_p50_ms, 2)),
      cell(fmtNum(g.ttft_p99_ms, 2)), cell(fmtNum(g.itl_p50_ms, 2)), cell(fmtNum(g.itl_p99_ms, 2)),
    );
    return tr;
  });
  document.querySelector("#generation tbody").replaceChildren(...trs);
}

function render(data) {
  const server = data.server;
  document.getElementById("server-name").textContent = server.name;
  const state = document.getElementById("server-state");
  state.textContent = server.ready ? "ready" : "not ready";
  state.className = `badge ${server.ready ? "ready" : "down"}`;
  document.getElementById("server-cpu").textContent = fmtPct(last(server.series.cpu));
  document.getElementById("server-rss").textContent = fmtBytes(last(server.series.tree_rss));
  document.getElementById("server-own-rss").textContent = fmtBytes(last(server.series.rss));
  document.getElementById("server-inflight").textContent = fmtNum(last(server.series.inflight), 0);
  const gpus = document.getElementById("server-gpus");
  gpus.hidden = !server.gpus.length;
  gpus.textContent = server.gpus.map((g) =>
    `GPU${g.index} ${fmtPct(g.utilization)} ${fmtBytes(g.memory_used)} / ${fmtBytes(g.memory_total)}`,
  ).join(" · ");
  renderTable(data);
  renderLlm(data);
  renderGeneration(data);
  const rows = versionRows(data);
  const times = data.time;
  const pick = (name) => rows.map((r) => ({ colour: r.colour, values: r.version.series[name] }));
  lineChart(document.getElementById("chart-throughput"), times, pick("throughput"));
  lineChart(document.getElementById("chart-latency"), times, pick("p99_ms"));
  lineChart(document.getElementById("chart-queue"), times, pick("queue"));
  heatmap(document.getElementById("heatmap-compute"), times,
    rows.map((r) => ({ label: r.label, values: r.version.series.busy })), "no models served");
  const shares = memoryShares(rows, times.length);
  heatmap(document.getElementById("heatmap-memory"), times,
    rows.map((r, i) => ({ label: r.label, values: shares[i] })),
    "no memory measurements yet");
  const legend = document.getElementById("legend");
  legend.replaceChildren(...rows.map((r) => {
    const span = document.createElement("span");
    span.textContent = r.label;
    span.style.setProperty("--colour", r.colour);
    return span;
  }));
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const response = await fetch("/dashboard/data", { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    render(await response.json());
    updates += 1;
    status.dataset.updates = String(updates);
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    status.textContent = `no data: ${error.message}`;
    document.getElementById("server-state").className = "badge down";
  }
  setTimeout(poll, POLL_MS);
}

poll();
