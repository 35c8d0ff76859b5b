// jattn attention viewer. Data: the JSON block #jattn-data written by jattn/view.py.
// A measure's maps are 8-bit codes relative to each query row's largest share (rows sum to 1),
// zlib-compressed and base64-encoded, with the row maxima and raw row sums as float32.
"use strict";

const MAX_LINES = 12000;  // head view: the strongest lines beyond this many are not drawn
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173", "#3182bd"];
const SVG_NS = "http://www.w3.org/2000/svg";
const RAMP = (() => {  // white -> dark blue, code 0..255
  const lut = new Uint8ClampedArray(256 * 3);
  for (let c = 0; c < 256; c++) {
    const t = c / 255;
    lut[3 * c] = 255 + (8 - 255) * t; lut[3 * c + 1] = 255 + (48 - 255) * t; lut[3 * c + 2] = 255 + (107 - 255) * t;
  }
  return lut;
})();

const $ = (id) => document.getElementById(id);
const DATA = JSON.parse($("jattn-data").textContent);
const decoded = new Map();  // "view/measure" -> {codes, rowMax, rowSum}
const state = { view: 0, measure: "alpha", layer: 0, heads: new Set([0]), threshold: 0.01 };
let generation = 0;  // the latest render wins when decoding overlaps

function headColor(h, H) {
  if (h < 0) return "#444";
  return H <= PALETTE.length ? PALETTE[h] : `hsl(${Math.round(360 * h / H)}, 65%, 45%)`;
}

async function inflate(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  if (typeof DecompressionStream === "undefined") {
    throw new Error("this browser lacks DecompressionStream (needs Chrome 80+, Firefox 113+, Safari 16.4+)");
  }
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

const view = () => DATA.views[state.view];
const measureOf = (v, key) => v.measures.find((m) => m.key === key);
const tokensOf = (side) => DATA.tokens[side];

function dims(m) {  // (L, H or 0, nq, nk)
  const s = m.shape;
  return m.per_head ? [s[0], s[1], s[2], s[3]] : [s[0], 0, s[1], s[2]];
}

async function load(v, m) {  // -> {codes, share (Float32Array, rows sum to 1), rowMax, rowSum}
  const id = `${v.name}/${m.key}`;
  if (decoded.has(id)) return decoded.get(id);
  const nk = dims(m)[3], rows = m.shape.slice(0, -1).reduce((a, b) => a * b, 1);
  const [codes, top, sum] = await Promise.all([inflate(m.codes), inflate(m.row_max), inflate(m.row_sum)]);
  const rowMax = new Float32Array(top.buffer), rowSum = new Float32Array(sum.buffer);
  const share = new Float32Array(rows * nk);
  for (let r = 0; r < rows; r++) {
    const scale = rowMax[r] / 255;
    for (let j = 0; j < nk; j++) share[r * nk + j] = codes[r * nk + j] * scale;
  }
  decoded.set(id, { codes, share, rowMax, rowSum });
  return decoded.get(id);
}

function rowIndex(m, l, h, i) {
  const [, H, nq] = dims(m);
  return m.per_head ? (l * H + h) * nq + i : l * nq + i;
}

function share(m, d, l, h, i, j) {  // the decoded share (bounds: jattn/view.py's docstring)
  return d.share[rowIndex(m, l, h, i) * dims(m)[3] + j];
}

function rawValue(m, d, l, h, i, j) {
  return share(m, d, l, h, i, j) * d.rowSum[rowIndex(m, l, h, i)];
}

const fmt = (x) => (Math.abs(x) >= 1000 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : x.toFixed(4));

// ------------------------------------------------------------------ tooltip
const tip = $("tooltip");
function showTip(ev, text) {
  tip.textContent = text;
  tip.style.display = "block";
  const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 4);
  const y = Math.min(ev.clientY + 14, window.innerHeight - tip.offsetHeight - 4);
  tip.style.left = `${Math.max(0, x)}px`;
  tip.style.top = `${Math.max(0, y)}px`;
}
function hideTip() { tip.style.display = "none"; }

// ------------------------------------------------------------------ controls
function fillSelect(sel, items, value) {
  sel.replaceChildren(...items.map(([v, label]) => new Option(label, v, false, String(v) === String(value))));
}

function shownHeads(m) {  // -1 stands for "the layer" (measures summed over heads)
  return m.per_head ? [...state.heads].sort((a, b) => a - b) : [-1];
}

function renderControls() {
  const v = view(), m = measureOf(v, state.measure), [L, H] = dims(measureOf(v, "alpha"));
  $("kind-box").style.display = DATA.views.length > 1 ? "" : "none";
  fillSelect($("kind"), DATA.views.map((w, i) => [i, w.label]), state.view);
  fillSelect($("measure"), v.measures.map((w) => [w.key, w.label]), state.measure);
  fillSelect($("layer"), [...Array(L).keys()].map((l) => [l, String(l)]), state.layer);
  $("measure-help").textContent =
    `${m.label}: ${m.help}. Rows are normalised to sum 1 (each value is its key's share of the row).`;
  const heads = $("heads");
  if (heads.childElementCount !== H) {
    heads.replaceChildren(...[...Array(H).keys()].map((h) => {
      const b = document.createElement("button");
      b.type = "button"; b.className = "head-chip"; b.dataset.head = h; b.textContent = h;
      b.style.setProperty("--c", headColor(h, H));
      b.title = `head ${h} (click to show or hide; arrow keys: one head at a time)`;
      return b;
    }));
  }
  for (const b of heads.children) {
    b.classList.toggle("on", state.heads.has(Number(b.dataset.head)));
    b.disabled = !m.per_head;
  }
  $("all-heads").disabled = !m.per_head;
}

// ------------------------------------------------------------------ head view
function textWidth(texts, header) {
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = "12px system-ui, sans-serif";
  const widest = Math.max(40, ...texts.map((t) => ctx.measureText(t).width));
  ctx.font = "bold 12px system-ui, sans-serif";
  return Math.ceil(Math.max(widest, ctx.measureText(header).width)) + 8;
}

function renderHeadView(m, d) {
  const v = view(), svg = $("head-svg"), [, H, nq, nk] = dims(m);
  const qt = tokensOf(v.queries), kt = tokensOf(v.keys);
  const ROW = 18, TOP = 34, GAP = 220, qh = `queries (${v.queries})`, kh = `keys (${v.keys})`;
  const left = textWidth(qt, qh), right = textWidth(kt, kh);
  const x1 = left + 4, x2 = left + GAP - 4;
  svg.setAttribute("width", left + GAP + right);
  svg.setAttribute("height", TOP + ROW * Math.max(nq, nk) + 8);
  const frag = document.createDocumentFragment();
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [a, val] of Object.entries(attrs)) e.setAttribute(a, val);
    if (text !== undefined) e.textContent = text;
    frag.appendChild(e);
    return e;
  };
  add("text", { x: left, y: 12, "text-anchor": "end", "font-weight": "bold" }, qh);
  add("text", { x: left + GAP, y: 12, "font-weight": "bold" }, kh);
  // Lines at or above the threshold, the strongest MAX_LINES of them (drawn weakest first).
  const heads = shownHeads(m), found = [];
  for (const h of heads) {
    for (let i = 0; i < nq; i++) {
      for (let j = 0; j < nk; j++) {
        const s = share(m, d, state.layer, h, i, j);
        if (s >= state.threshold && s > 0) found.push([s, h, i, j]);
      }
    }
  }
  found.sort((a, b) => a[0] - b[0]);
  const drawn = found.slice(Math.max(0, found.length - MAX_LINES));
  for (const [s, h, i, j] of drawn) {
    add("line", { x1, y1: TOP + ROW * i, x2, y2: TOP + ROW * j, stroke: headColor(h, H), "stroke-opacity": s.toFixed(6),
                  "data-q": i, "data-k": j, "data-h": h, "data-v": s.toFixed(6) });
  }
  qt.forEach((t, i) => add("text", { x: left, y: TOP + ROW * i, "text-anchor": "end", class: "q", "data-i": i }, t));
  kt.forEach((t, j) => add("text", { x: left + GAP, y: TOP + ROW * j, class: "k", "data-j": j }, t));
  svg.replaceChildren(frag);
  Object.assign(svg.dataset, { view: v.name, measure: m.key, layer: state.layer, heads: heads.join(","),
                               lines: drawn.length, candidates: found.length });
  const cut = found.length > drawn.length ? `, the strongest ${drawn.length} of ${found.length} drawn` : "";
  const which = m.per_head ? `heads ${heads.join(", ") || "none"}` : "all heads (layer measure)";
  $("head-status").textContent = `layer ${state.layer}, ${which}: ` +
    `${found.length} lines ≥ ${state.threshold}${cut}`;
}

function tokenTip(ev, m, d, side, index) {
  const v = view(), qt = tokensOf(v.queries), kt = tokensOf(v.keys);
  const name = side === "q" ? `query ${index} ${qt[index]}` : `key ${index} ${kt[index]}`;
  const lines = [`${name} — ${m.label}, layer ${state.layer}`];
  for (const h of shownHeads(m)) {
    const other = side === "q" ? kt : qt;
    const vals = other.map((_, o) => (side === "q" ? share(m, d, state.layer, h, index, o)
                                                  : share(m, d, state.layer, h, o, index)));
    const top = [...vals.keys()].sort((a, b) => vals[b] - vals[a]).slice(0, 4);
    lines.push(`${h < 0 ? "layer" : `head ${h}`}: ` + top.map((o) => `${other[o]} ${fmt(vals[o])}`).join(", "));
  }
  showTip(ev, lines.join("\n"));
}

function wireHeadView() {
  const svg = $("head-svg");
  svg.addEventListener("mouseover", async (ev) => {
    const t = ev.target, v = view(), m = measureOf(v, state.measure), d = await load(v, m);
    if (t.tagName === "line") {
      const i = +t.dataset.q, j = +t.dataset.k, h = +t.dataset.h;
      showTip(ev, `${h < 0 ? "all heads" : `head ${h}`}, layer ${state.layer}: ${tokensOf(v.queries)[i]} (${i}) → ` +
        `${tokensOf(v.keys)[j]} (${j})\n${m.label}: share ${fmt(share(m, d, state.layer, h, i, j))}, ` +
        `raw ${fmt(rawValue(m, d, state.layer, h, i, j))}`);
    } else if (t.tagName === "text" && (t.classList.contains("q") || t.classList.contains("k"))) {
      const side = t.classList.contains("q") ? "q" : "k", index = +(side === "q" ? t.dataset.i : t.dataset.j);
      svg.classList.add("focus");
      t.classList.add("on");
      for (const line of svg.querySelectorAll(`line[data-${side}="${index}"]`)) line.classList.add("on");
      tokenTip(ev, m, d, side, index);
    }
  });
  svg.addEventListener("mouseout", (ev) => {
    if (ev.target.tagName === "text") {
      svg.classList.remove("focus");
      for (const e of svg.querySelectorAll(".on")) e.classList.remove("on");
    }
    hideTip();
  });
}

// ------------------------------------------------------------------ model view
let observer = null;

function drawCell(canvas, m, d) {
  const [, , nq, nk] = dims(m), l = +canvas.dataset.layer, h = +canvas.dataset.head;
  const ctx = canvas.getContext("2d"), img = ctx.createImageData(nk, nq), px = img.data;
  const base = rowIndex(m, l, h, 0) * nk;
  for (let p = 0; p < nq * nk; p++) {
    const c = d.codes[base + p];  // relative to the row's largest share
    px[4 * p] = RAMP[3 * c]; px[4 * p + 1] = RAMP[3 * c + 1]; px[4 * p + 2] = RAMP[3 * c + 2]; px[4 * p + 3] = 255;
  }
  ctx.putImageData(img, 0, 0);
  canvas.dataset.drawn = `${view().name}/${m.key}`;
}

function buildGrid(m, d) {
  const grid = $("grid"), [L, H, nq, nk] = dims(m), cols = m.per_head ? H : 1;
  if (observer) observer.disconnect();
  const room = Math.max(320, $("model-view").clientWidth - 70);  // the labels' column and gaps aside
  const cell = m.per_head ? Math.max(28, Math.min(72, Math.floor(room / cols) - 7)) : 140;
  grid.style.setProperty("--cell", `${cell}px`);
  grid.style.gridTemplateColumns = `auto repeat(${cols}, ${cell + 4}px)`;
  const items = [document.createElement("div")];
  for (let c = 0; c < cols; c++) {
    const lab = document.createElement("div");
    lab.className = "label"; lab.textContent = m.per_head ? `head ${c}` : "all heads";
    items.push(lab);
  }
  observer = new IntersectionObserver((entries) => {
    for (const e of entries) {
      if (e.isIntersecting && e.target.dataset.drawn !== `${view().name}/${m.key}`) drawCell(e.target, m, d);
    }
  }, { rootMargin: "200px" });
  for (let l = 0; l < L; l++) {
    const lab = document.createElement("div");
    lab.className = "label"; lab.textContent = `layer ${l}`;
    items.push(lab);
    for (let c = 0; c < cols; c++) {
      const canvas = document.createElement("canvas");
      canvas.width = nk; canvas.height = nq;
      canvas.className = "cell";
      canvas.dataset.layer = l; canvas.dataset.head = m.per_head ? c : -1;
      items.push(canvas);
      observer.observe(canvas);
    }
  }
  grid.replaceChildren(...items);
  grid.dataset.measure = m.key;
  grid.dataset.view = view().name;
}

function markSelected(m) {
  for (const c of $("grid").querySelectorAll("canvas")) {
    const on = +c.dataset.layer === state.layer && (!m.per_head || state.heads.has(+c.dataset.head));
    c.classList.toggle("selected", on);
  }
}

function wireGrid() {
  const grid = $("grid");
  grid.addEventListener("click", (ev) => {
    const c = ev.target;
    if (c.tagName !== "CANVAS") return;
    state.layer = +c.dataset.layer;
    if (+c.dataset.head >= 0) state.heads = new Set([+c.dataset.head]);
    render(false);
  });
  grid.addEventListener("mousemove", async (ev) => {
    const c = ev.target;
    if (c.tagName !== "CANVAS") { hideTip(); return; }
    const v = view(), m = measureOf(v, state.measure), d = await load(v, m), [, , nq, nk] = dims(m);
    const r = c.getBoundingClientRect();
    const i = Math.min(nq - 1, Math.floor((ev.clientY - r.top - 2) / (r.height - 4) * nq));
    const j = Math.min(nk - 1, Math.floor((ev.clientX - r.left - 2) / (r.width - 4) * nk));
    if (i < 0 || j < 0) { hideTip(); return; }
    const l = +c.dataset.layer, h = +c.dataset.head;
    showTip(ev, `layer ${l}, ${h < 0 ? "all heads" : `head ${h}`}: ` +
      `${tokensOf(v.queries)[i]} (${i}) → ${tokensOf(v.keys)[j]} (${j})\n` +
      `${m.label}: share ${fmt(share(m, d, l, h, i, j))}, raw ${fmt(rawValue(m, d, l, h, i, j))}`);
  });
  grid.addEventListener("mouseleave", hideTip);
}

// ------------------------------------------------------------------ state changes
async function render(rebuild) {
  const g = ++generation, v = view(), m = measureOf(v, state.measure);
  const d = await load(v, m);
  if (g !== generation) return;
  renderControls();
  renderHeadView(m, d);
  if (rebuild || $("grid").dataset.measure !== m.key || $("grid").dataset.view !== v.name) buildGrid(m, d);
  markSelected(m);
  document.body.dataset.ready = "1";
}

function wireControls() {
  const done = (e) => e.target.blur();  // arrow keys go back to layer/head navigation
  $("kind").addEventListener("change", (e) => {
    state.view = +e.target.value;
    const v = view(), [L, H] = dims(measureOf(v, "alpha"));
    if (!measureOf(v, state.measure)) state.measure = "alpha";
    state.layer = Math.min(state.layer, L - 1);
    state.heads = new Set([...state.heads].filter((h) => h < H));
    if (!state.heads.size) state.heads.add(0);
    done(e); render(true);
  });
  $("measure").addEventListener("change", (e) => { state.measure = e.target.value; done(e); render(true); });
  $("layer").addEventListener("change", (e) => { state.layer = +e.target.value; done(e); render(false); });
  $("threshold").addEventListener("change", (e) => {
    const t = Number(e.target.value);
    if (Number.isFinite(t) && t >= 0 && t <= 1) state.threshold = t;
    render(false);
  });
  $("heads").addEventListener("click", (e) => {
    const h = e.target.dataset.head;
    if (h === undefined) return;
    if (state.heads.has(+h)) state.heads.delete(+h); else state.heads.add(+h);
    render(false);
  });
  $("all-heads").addEventListener("click", () => {
    const [, H] = dims(measureOf(view(), "alpha"));
    state.heads = new Set(state.heads.size === H ? [] : [...Array(H).keys()]);
    render(false);
  });
  document.addEventListener("keydown", (e) => {
    if (["INPUT", "SELECT", "TEXTAREA"].includes(e.target.tagName) || e.altKey || e.ctrlKey || e.metaKey) return;
    const v = view(), m = measureOf(v, state.measure), [L, H] = dims(measureOf(v, "alpha"));
    if (e.key === "ArrowUp" || e.key === "ArrowDown") {
      state.layer = Math.max(0, Math.min(L - 1, state.layer + (e.key === "ArrowDown" ? 1 : -1)));
    } else if ((e.key === "ArrowLeft" || e.key === "ArrowRight") && m.per_head) {
      const step = e.key === "ArrowRight" ? 1 : -1;
      const cur = state.heads.size === 1 ? [...state.heads][0] : (step > 0 ? -1 : H);
      state.heads = new Set([Math.max(0, Math.min(H - 1, cur + step))]);
    } else {
      return;
    }
    e.preventDefault();
    render(false);
  });
}

function clip(text, n = 140) {
  return text.length > n ? `${text.slice(0, n)}…` : text;
}

function notes() {
  const t = DATA.tokens, parts = Object.keys(t).map((k) => `${t[k].length} ${k} tokens`);
  const full = DATA.views.length > 1
    ? `source: “${DATA.text}” → target (${DATA.generated ? "the model's own translation" : "teacher-forced"}): ` +
      `“${DATA.target}”`
    : `“${DATA.text}”${DATA.pair ? ` + “${DATA.pair}”` : ""}`;
  $("subtitle").textContent = `${DATA.model} · ${clip(full)} · ${parts.join(", ")}`;
  $("subtitle").title = full;
  $("notes").textContent = "Layers and heads are 0-based. Keys: ↑/↓ layer, ←/→ head (one at a time). " +
    "Every query row is divided by its sum, so values are shares of the row (α unchanged). " +
    "Head view: line opacity = share; model view: each row coloured relative to its largest share. " +
    "Stored as 8-bit codes relative to the row's largest share: a shown share is within " +
    `${(DATA.error_bound * 100).toFixed(2)}% of that row maximum; raw = share × the row's sum.` +
    (DATA.views.length > 1
      ? " Target row t is the decoder position whose input is target token t (it predicts token t+1)." : "");
}

function fail(err) {
  console.error(err);
  const p = document.createElement("p");
  p.id = "error";
  p.textContent = `The viewer failed: ${err && err.message ? err.message : err}`;
  document.body.prepend(p);
  document.body.dataset.ready = "error";
}

try {
  const [, H] = dims(measureOf(view(), "alpha"));
  state.heads = new Set([...Array(H).keys()]);
  notes();
  wireControls();
  wireHeadView();
  wireGrid();
  render(true).catch(fail);
} catch (err) {
  fail(err);
}
