// jattn attention viewer, part 3 of 3: the two panels, the difference view and their wiring.
// Every number shown is a decoded share from jattn/viz/view.py, or (the difference view) the
// right panel's decoded share minus the left's.
"use strict";

const SIDES = ["left", "right"];
const state = {
  view: 0, threshold: 0.01, linked: true, active: 0, highlight: null,
  // left: the first model's weights; right: the second model's weights when there is one,
  // else the first model's per-head norms (Kobayashi et al. 2020: weights vs norms)
  // (one head each, so that the difference view has a map on either side)
  panels: [{ source: 0, measure: "alpha", layer: 0, heads: new Set([0]) },
           { source: SOURCES.length - 1, measure: SOURCES.length > 1 ? "alpha" : "norm", layer: 0, heads: new Set([0]) }],
};
let generation = 0;  // the latest render wins when decoding overlaps
let lastDiff = null;  // what the difference view draws (window.jattnView.difference)
const panelEl = (p) => $(`panel-${p}`);
const part = (p, cls) => panelEl(p).querySelector(`.${cls}`);
const panelMeasure = (p) => measureOf(viewOf(state.panels[p].source, state.view), state.panels[p].measure);
const shownHeads = (p) => (panelMeasure(p).per_head ? [...state.panels[p].heads].sort((a, b) => a - b) : [-1]);

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

// ------------------------------------------------------------------ selection
function clampTo(p) {  // keep panel p's layer and heads inside its model
  const s = state.panels[p], [L, H] = layersHeads(s.source, state.view);
  s.layer = Math.min(s.layer, L - 1);
  s.heads = new Set([...s.heads].filter((h) => h < H));
  if (!s.heads.size) s.heads.add(0);
}

function select(p, layer, heads) {  // panel p (and, when linked, the other) to this layer and heads
  state.active = p;
  for (const q of state.linked ? [0, 1] : [p]) {
    state.panels[q].layer = layer;
    state.panels[q].heads = new Set(heads);
    clampTo(q);
  }
  render();
}

// ------------------------------------------------------------------ panels
function fillSelect(sel, items, value) {
  sel.replaceChildren(...items.map(([v, label]) => new Option(label, v, false, String(v) === String(value))));
}

function buildPanel(p) {
  const el = panelEl(p);
  el.replaceChildren($("panel-template").content.cloneNode(true));
  part(p, "side").textContent = `${SIDES[p]} panel`;
  part(p, "source-box").style.display = SOURCES.length > 1 ? "" : "none";
  const done = (e) => e.target.blur();  // arrow keys go back to layer/head navigation
  part(p, "source").addEventListener("change", (e) => {
    state.panels[p].source = +e.target.value; clampTo(p); state.active = p; done(e); render();
  });
  part(p, "measure").addEventListener("change", (e) => {
    state.panels[p].measure = e.target.value; state.active = p; done(e); render();
  });
  part(p, "layer").addEventListener("change", (e) => {
    done(e); select(p, +e.target.value, state.panels[p].heads);
  });
  part(p, "heads").addEventListener("click", (e) => {
    const h = e.target.dataset.head;
    if (h === undefined) return;
    const heads = new Set(state.panels[p].heads);
    if (heads.has(+h)) heads.delete(+h); else heads.add(+h);
    select(p, state.panels[p].layer, heads);
  });
  part(p, "all-heads").addEventListener("click", () => {
    const [, H] = layersHeads(state.panels[p].source, state.view);
    select(p, state.panels[p].layer, state.panels[p].heads.size === H ? [] : [...Array(H).keys()]);
  });
  el.addEventListener("mouseenter", () => { state.active = p; markActive(); });
  wireHeadView(p);
  wireGrid(p);
}

function renderControls(p) {
  const s = state.panels[p], m = panelMeasure(p), v = viewOf(s.source, state.view), [L, H] = layersHeads(s.source, state.view);
  fillSelect(part(p, "source"), SOURCES.map((w, i) => [i, `${"AB"[i]}: ${w.name}`]), s.source);
  fillSelect(part(p, "measure"), v.measures.map((w) => [w.key, w.label]), s.measure);
  fillSelect(part(p, "layer"), [...Array(L).keys()].map((l) => [l, String(l)]), s.layer);
  part(p, "measure-help").textContent = `${m.label}: ${m.help}.`;
  const heads = part(p, "heads");
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
    b.classList.toggle("on", s.heads.has(Number(b.dataset.head)));
    b.disabled = !m.per_head;
  }
  part(p, "all-heads").disabled = !m.per_head;
}

function renderHeadView(p, d) {
  const s = state.panels[p], m = panelMeasure(p), v = viewOf(s.source, state.view), svg = part(p, "head-svg");
  const heads = shownHeads(p), { drawn, found } = drawHeadView(svg, v, m, d, s.layer, heads, state.threshold);
  Object.assign(svg.dataset, { view: v.name, source: s.source, measure: m.key, layer: s.layer, heads: heads.join(","),
                               lines: drawn, candidates: found });
  const cut = found > drawn ? `, the strongest ${drawn} of ${found} drawn` : "";
  const which = m.per_head ? `heads ${heads.join(", ") || "none"}` : "all heads (layer measure)";
  const model = SOURCES.length > 1 ? `${"AB"[s.source]}, ` : "";
  part(p, "status").textContent = `${model}${m.label}, layer ${s.layer}, ${which}: ${found} lines ≥ ${state.threshold}${cut}`;
  applyHighlight();
}

function wireHeadView(p) {
  const svg = part(p, "head-svg");
  svg.addEventListener("mouseover", async (ev) => {
    const t = ev.target, s = state.panels[p], v = viewOf(s.source, state.view), m = panelMeasure(p);
    const d = await load(s.source, state.view, s.measure);
    if (t.tagName === "line") {
      const i = +t.dataset.q, j = +t.dataset.k, h = +t.dataset.h;
      showTip(ev, `${h < 0 ? "all heads" : `head ${h}`}, layer ${s.layer}: ${tokensOf(v.queries)[i]} (${i}) → ` +
        `${tokensOf(v.keys)[j]} (${j})\n${m.label}: share ${fmt(share(m, d, s.layer, h, i, j))}, ` +
        `raw ${fmt(rawValue(m, d, s.layer, h, i, j))}`);
    } else if (t.tagName === "text" && (t.classList.contains("q") || t.classList.contains("k"))) {
      const side = t.classList.contains("q") ? "q" : "k";
      setHighlight({ side, index: +(side === "q" ? t.dataset.i : t.dataset.j) });
      showTip(ev, tokenTip(p, m, d, side, state.highlight.index));
    }
  });
  svg.addEventListener("mouseout", (ev) => {
    if (ev.target.tagName === "text") setHighlight(null);
    hideTip();
  });
}

function tokenTip(p, m, d, side, index) {
  const s = state.panels[p], v = viewOf(s.source, state.view), qt = tokensOf(v.queries), kt = tokensOf(v.keys);
  const lines = [`${side === "q" ? `query ${index} ${qt[index]}` : `key ${index} ${kt[index]}`} — ${m.label}, layer ${s.layer}`];
  for (const h of shownHeads(p)) {
    const other = side === "q" ? kt : qt;
    const vals = other.map((_, o) => (side === "q" ? share(m, d, s.layer, h, index, o) : share(m, d, s.layer, h, o, index)));
    const top = [...vals.keys()].sort((a, b) => vals[b] - vals[a]).slice(0, 4);
    lines.push(`${h < 0 ? "layer" : `head ${h}`}: ` + top.map((o) => `${other[o]} ${fmt(vals[o])}`).join(", "));
  }
  return lines.join("\n");
}

// Linked token highlighting: the hovered token (a query or a key), in both panels and the difference.
function setHighlight(h) {
  state.highlight = h;
  applyHighlight();
  if (lastDiff && !lastDiff.reason) drawDifference($("diff-map"), lastDiff, state.highlight);
  $("diff-map").dataset.highlight = h ? `${h.side}:${h.index}` : "";
}

function applyHighlight() {
  const h = state.highlight;
  for (const p of [0, 1]) {
    const svg = part(p, "head-svg");
    for (const e of svg.querySelectorAll(".on")) e.classList.remove("on");
    svg.classList.toggle("focus", !!h);
    if (!h) continue;
    const attr = h.side === "q" ? "i" : "j";
    for (const e of svg.querySelectorAll(`text.${h.side}[data-${attr}="${h.index}"]`)) e.classList.add("on");
    for (const line of svg.querySelectorAll(`line[data-${h.side}="${h.index}"]`)) line.classList.add("on");
  }
}

// ------------------------------------------------------------------ thumbnails
function buildGrid(p, d) {
  const s = state.panels[p], m = panelMeasure(p), grid = part(p, "grid"), [L, H] = dims(m), cols = m.per_head ? H : 1;
  const room = Math.max(300, panelEl(p).clientWidth - 56);  // the labels' column and gaps aside
  const cell = m.per_head ? Math.max(20, Math.min(64, Math.floor(room / cols) - 6)) : 96;
  grid.style.setProperty("--cell", `${cell}px`);
  grid.style.gridTemplateColumns = `auto repeat(${cols}, ${cell + 4}px)`;
  const items = [document.createElement("div")];
  for (let c = 0; c < cols; c++) {
    const lab = document.createElement("div");
    lab.className = "label"; lab.textContent = m.per_head ? `h${c}` : "all heads";
    items.push(lab);
  }
  const key = `${s.source}/${viewOf(s.source, state.view).name}/${m.key}`;
  for (let l = 0; l < L; l++) {
    const lab = document.createElement("div");
    lab.className = "label"; lab.textContent = `layer ${l}`;
    items.push(lab);
    for (let c = 0; c < cols; c++) {
      const canvas = document.createElement("canvas");
      canvas.dataset.layer = l; canvas.dataset.head = m.per_head ? c : -1;
      drawThumbnail(canvas, m, d, l, m.per_head ? c : 0, cell);
      canvas.dataset.drawn = key;
      items.push(canvas);
    }
  }
  grid.replaceChildren(...items);
  grid.dataset.key = key;
}

function markSelected(p) {
  const s = state.panels[p], per = panelMeasure(p).per_head;
  for (const c of part(p, "grid").querySelectorAll("canvas")) {
    c.classList.toggle("selected", +c.dataset.layer === s.layer && (!per || s.heads.has(+c.dataset.head)));
  }
}

function wireGrid(p) {
  const grid = part(p, "grid");
  grid.addEventListener("click", (ev) => {
    const c = ev.target;
    if (c.tagName !== "CANVAS") return;
    select(p, +c.dataset.layer, +c.dataset.head >= 0 ? [+c.dataset.head] : state.panels[p].heads);
  });
  grid.addEventListener("mousemove", async (ev) => {
    const c = ev.target;
    if (c.tagName !== "CANVAS") { hideTip(); return; }
    const s = state.panels[p], v = viewOf(s.source, state.view), m = panelMeasure(p), [, , nq, nk] = dims(m);
    const d = await load(s.source, state.view, s.measure), r = c.getBoundingClientRect();
    const i = Math.min(nq - 1, Math.floor((ev.clientY - r.top - 2) / (r.height - 4) * nq));
    const j = Math.min(nk - 1, Math.floor((ev.clientX - r.left - 2) / (r.width - 4) * nk));
    if (i < 0 || j < 0) { hideTip(); return; }
    const l = +c.dataset.layer, h = +c.dataset.head;
    showTip(ev, `layer ${l}, ${h < 0 ? "all heads" : `head ${h}`}: ` +
      `${tokensOf(v.queries)[i]} (${i}) → ${tokensOf(v.keys)[j]} (${j})\n` +
      `${m.label}: share ${fmt(share(m, d, l, h, i, j))}, raw ${fmt(rawValue(m, d, l, h, i, j))} (click to open)`);
  });
  grid.addEventListener("mouseleave", hideTip);
}

// ------------------------------------------------------------------ difference view
function oneMap(p) {  // the panel's single map, or why there is none
  const s = state.panels[p], m = panelMeasure(p), heads = shownHeads(p);
  if (heads.length !== 1) return { reason: `the ${SIDES[p]} panel shows ${heads.length} heads: pick one (click a thumbnail)` };
  const model = SOURCES.length > 1 ? `${"AB"[s.source]} ` : "";
  return { m, source: s.source, layer: s.layer, head: heads[0],
           label: `${model}${m.label}, layer ${s.layer}${heads[0] < 0 ? "" : `, head ${heads[0]}`}` };
}

function difference(ds) {  // right − left of the two decoded shares, and the colour scale max |Δ|
  const a = oneMap(0), b = oneMap(1);
  if (a.reason || b.reason) return { reason: a.reason || b.reason };
  const v = viewOf(0, state.view), [, , nq, nk] = dims(a.m), values = new Float64Array(nq * nk);
  let scale = 0;
  for (let i = 0; i < nq; i++) {
    for (let j = 0; j < nk; j++) {
      const x = share(b.m, ds[1], b.layer, b.head, i, j) - share(a.m, ds[0], a.layer, a.head, i, j);
      values[i * nk + j] = x;
      scale = Math.max(scale, Math.abs(x));
    }
  }
  return { nq, nk, values, scale, queries: v.queries, keys: v.keys, left: a, right: b };
}

function renderDifference(ds) {
  lastDiff = difference(ds);
  const canvas = $("diff-map"), diff = lastDiff;
  canvas.style.display = diff.reason ? "none" : "";
  if (diff.reason) {
    $("diff-status").textContent = "";
    $("diff-what").textContent = `No difference to draw: ${diff.reason}.`;
    canvas.dataset.scale = "";
    return;
  }
  diff.geometry = drawDifference(canvas, diff, state.highlight);
  $("diff-what").textContent = `right: ${diff.right.label} − left: ${diff.left.label} (shares of each query row)`;
  $("diff-status").textContent = diff.scale > 0 ? `colour scale ±${fmt(diff.scale)} (max |Δ|)` : "the two maps are equal";
  $("diff-lo").textContent = `−${fmt(diff.scale)}`;
  $("diff-hi").textContent = `+${fmt(diff.scale)}`;
  Object.assign(canvas.dataset, { scale: diff.scale, left: diff.left.label, right: diff.right.label });
}

function wireDifference() {
  const canvas = $("diff-map");
  canvas.addEventListener("mousemove", (ev) => {
    const diff = lastDiff;
    if (!diff || diff.reason) return;
    const r = canvas.getBoundingClientRect(), { x0, y0, cell } = diff.geometry;
    const x = (ev.clientX - r.left) * canvas.width / r.width - x0, y = (ev.clientY - r.top) * canvas.height / r.height - y0;
    const i = Math.floor(y / cell), j = Math.floor(x / cell);
    if (i < 0 || j < 0 || i >= diff.nq || j >= diff.nk) { hideTip(); return; }
    const delta = diff.values[i * diff.nk + j];
    showTip(ev, `${tokensOf(diff.queries)[i]} (${i}) → ${tokensOf(diff.keys)[j]} (${j})\nright − left: ${fmt(delta)}`);
    if (!state.highlight || state.highlight.side !== "q" || state.highlight.index !== i) setHighlight({ side: "q", index: i });
  });
  canvas.addEventListener("mouseleave", () => { hideTip(); setHighlight(null); });
}

// ------------------------------------------------------------------ state changes
function markActive() {
  for (const p of [0, 1]) panelEl(p).classList.toggle("active", p === state.active);
}

async function render(rebuild = false) {
  const g = ++generation;
  const ds = await Promise.all([0, 1].map((p) => load(state.panels[p].source, state.view, state.panels[p].measure)));
  if (g !== generation) return;
  $("kind-box").style.display = DATA.views.length > 1 ? "" : "none";
  fillSelect($("kind"), DATA.views.map((w, i) => [i, w.label]), state.view);
  for (const p of [0, 1]) {
    renderControls(p);
    renderHeadView(p, ds[p]);
    const s = state.panels[p], key = `${s.source}/${viewOf(s.source, state.view).name}/${s.measure}`;
    if (rebuild || part(p, "grid").dataset.key !== key) buildGrid(p, ds[p]);
    markSelected(p);
  }
  markActive();
  renderDifference(ds);
  document.body.dataset.ready = "1";
}

function wireControls() {
  $("kind").addEventListener("change", (e) => {
    state.view = +e.target.value;
    for (const p of [0, 1]) clampTo(p);
    e.target.blur();
    render();
  });
  $("link").addEventListener("change", (e) => {
    state.linked = e.target.checked;
    e.target.blur();
    if (state.linked) select(state.active, state.panels[state.active].layer, state.panels[state.active].heads);
  });
  $("threshold").addEventListener("change", (e) => {
    const t = Number(e.target.value);
    if (Number.isFinite(t) && t >= 0 && t <= 1) state.threshold = t;
    render();
  });
  document.addEventListener("keydown", (e) => {
    if (["INPUT", "SELECT", "TEXTAREA"].includes(e.target.tagName) || e.altKey || e.ctrlKey || e.metaKey) return;
    const p = state.active, s = state.panels[p], [L, H] = layersHeads(s.source, state.view);
    if (e.key === "ArrowUp" || e.key === "ArrowDown") {
      select(p, Math.max(0, Math.min(L - 1, s.layer + (e.key === "ArrowDown" ? 1 : -1))), s.heads);
    } else if ((e.key === "ArrowLeft" || e.key === "ArrowRight") && panelMeasure(p).per_head) {
      const step = e.key === "ArrowRight" ? 1 : -1;
      const cur = s.heads.size === 1 ? [...s.heads][0] : (step > 0 ? -1 : H);
      select(p, s.layer, [Math.max(0, Math.min(H - 1, cur + step))]);
    } else {
      return;
    }
    e.preventDefault();
  });
  let width = window.innerWidth;
  window.addEventListener("resize", () => { if (window.innerWidth !== width) { width = window.innerWidth; render(true); } });
}

function clip(text, n = 140) {
  return text.length > n ? `${text.slice(0, n)}…` : text;
}

function notes() {
  const t = DATA.tokens, parts = Object.keys(t).map((k) => `${t[k].length} ${k} tokens`);
  const full = DATA.views.length > 1
    ? `source: “${DATA.text}” → target (${DATA.generated ? "the first model's own translation" : "teacher-forced"}): ` +
      `“${DATA.target}”`
    : `“${DATA.text}”${DATA.pair ? ` + “${DATA.pair}”` : ""}`;
  const models = SOURCES.length > 1 ? `A: ${DATA.model} vs B: ${DATA.compare.model}` : DATA.model;
  $("subtitle").textContent = `${models} · ${clip(full)} · ${parts.join(", ")}`;
  $("subtitle").title = full;
  $("notes").textContent = "Layers and heads are 0-based. Keys: ↑/↓ layer, ←/→ head (one at a time), in the last " +
    "panel used (both while linked). Hover a token to mark it in both panels and the difference. " +
    "Every query row is divided by its sum, so values are shares of the row (α unchanged). " +
    "Head view: line opacity = share; thumbnails: each row coloured relative to its largest share, a pixel " +
    "showing the largest share of the cells it covers. Stored as 8-bit codes relative to the row's largest share: " +
    `a shown share is within ${(DATA.error_bound * 100).toFixed(2)}% of that row maximum (a difference, within the ` +
    "sum of the two rows' bounds); raw = share × the row's sum." +
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

// Read-only hooks for tests and for scripting the page: the selection and the drawn difference.
window.jattnView = {
  state: () => ({ view: state.view, linked: state.linked, active: state.active, highlight: state.highlight,
                  panels: state.panels.map((s) => ({ ...s, heads: [...s.heads].sort((a, b) => a - b) })) }),
  difference: () => (lastDiff && !lastDiff.reason
    ? { nq: lastDiff.nq, nk: lastDiff.nk, scale: lastDiff.scale, values: Array.from(lastDiff.values),
        left: lastDiff.left.label, right: lastDiff.right.label }
    : { reason: lastDiff ? lastDiff.reason : "not drawn yet" }),
};

try {
  notes();
  drawScaleBar($("diff-bar"));
  for (const p of [0, 1]) buildPanel(p);
  wireControls();
  wireDifference();
  render(true).catch(fail);
} catch (err) {
  fail(err);
}
