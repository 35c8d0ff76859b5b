// jattn attention viewer, part 2 of 3: drawing (head view lines, thumbnails, the difference map).
"use strict";

const MAX_LINES = 12000;  // head view: the strongest lines beyond this many are not drawn
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173", "#3182bd"];
const SVG_NS = "http://www.w3.org/2000/svg";

function lut(from, to) {  // 256 RGB triples from one colour to another
  const out = new Uint8ClampedArray(256 * 3);
  for (let c = 0; c < 256; c++) {
    for (let k = 0; k < 3; k++) out[3 * c + k] = from[k] + (to[k] - from[k]) * (c / 255);
  }
  return out;
}
const RAMP = lut([255, 255, 255], [8, 48, 107]);  // code 0..255 (relative to the row's largest): white -> dark blue
const BLUES = lut([255, 255, 255], [33, 102, 172]);  // |Δ| / scale, Δ < 0
const REDS = lut([255, 255, 255], [178, 24, 43]);  // Δ / scale, Δ > 0

function divergingColor(x, scale) {  // -> [r, g, b]: centred at 0 (white), ±scale saturated
  const t = scale > 0 ? Math.min(255, Math.round(255 * Math.abs(x) / scale)) : 0, table = x < 0 ? BLUES : REDS;
  return [table[3 * t], table[3 * t + 1], table[3 * t + 2]];
}

function headColor(h, H) {
  if (h < 0) return "#444";
  return H <= PALETTE.length ? PALETTE[h] : `hsl(${Math.round(360 * h / H)}, 65%, 45%)`;
}

function textWidth(texts, header) {
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = "12px system-ui, sans-serif";
  const widest = Math.max(40, ...texts.map((t) => ctx.measureText(t).width));
  ctx.font = "bold 12px system-ui, sans-serif";
  return Math.ceil(Math.max(widest, ctx.measureText(header).width)) + 8;
}

// Head view: query tokens on the left, keys on the right, a line per (head, query, key) whose
// share is at least the threshold, opacity = share. -> {drawn, found}
function drawHeadView(svg, v, m, d, layer, heads, threshold) {
  const [, H, nq, nk] = dims(m), qt = tokensOf(v.queries), kt = tokensOf(v.keys);
  const ROW = 18, TOP = 34, GAP = 170, qh = `queries (${v.queries})`, kh = `keys (${v.keys})`;
  const left = textWidth(qt, qh), right = textWidth(kt, kh), x1 = left + 4, x2 = left + GAP - 4;
  svg.setAttribute("width", left + GAP + right);
  svg.setAttribute("height", TOP + ROW * Math.max(nq, nk) + 8);
  const frag = document.createDocumentFragment();
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [a, val] of Object.entries(attrs)) e.setAttribute(a, val);
    if (text !== undefined) e.textContent = text;
    frag.appendChild(e);
  };
  add("text", { x: left, y: 12, "text-anchor": "end", "font-weight": "bold" }, qh);
  add("text", { x: left + GAP, y: 12, "font-weight": "bold" }, kh);
  const found = [];
  for (const h of heads) {
    for (let i = 0; i < nq; i++) {
      for (let j = 0; j < nk; j++) {
        const s = share(m, d, layer, h, i, j);
        if (s >= threshold && s > 0) found.push([s, h, i, j]);
      }
    }
  }
  found.sort((a, b) => a[0] - b[0]);  // drawn weakest first, the strongest MAX_LINES of them
  const drawn = found.slice(Math.max(0, found.length - MAX_LINES));
  for (const [s, h, i, j] of drawn) {
    add("line", { x1, y1: TOP + ROW * i, x2, y2: TOP + ROW * j, stroke: headColor(h, H), "stroke-opacity": s.toFixed(6),
                  "data-q": i, "data-k": j, "data-h": h });
  }
  qt.forEach((t, i) => add("text", { x: left, y: TOP + ROW * i, "text-anchor": "end", class: "q", "data-i": i }, t));
  kt.forEach((t, j) => add("text", { x: left + GAP, y: TOP + ROW * j, class: "k", "data-j": j }, t));
  svg.replaceChildren(frag);
  return { drawn: drawn.length, found: found.length };
}

// A thumbnail at its displayed size: a display pixel shows the largest code of the block of
// (query, key) cells it covers, so a one-token-wide line (a previous-token head at 128 tokens
// in a 30-pixel thumbnail) stays visible instead of falling between sampled rows.
function drawThumbnail(canvas, m, d, l, h, size) {
  const [, , nq, nk] = dims(m), height = Math.min(nq, size), width = Math.min(nk, size);
  canvas.width = width; canvas.height = height;
  const ctx = canvas.getContext("2d"), img = ctx.createImageData(width, height), px = img.data;
  const base = rowIndex(m, l, h, 0) * nk;
  for (let y = 0; y < height; y++) {
    const i0 = Math.floor(y * nq / height), i1 = Math.max(i0 + 1, Math.floor((y + 1) * nq / height));
    for (let x = 0; x < width; x++) {
      const j0 = Math.floor(x * nk / width), j1 = Math.max(j0 + 1, Math.floor((x + 1) * nk / width));
      let c = 0;
      for (let i = i0; i < i1; i++) {
        for (let j = j0; j < j1; j++) c = Math.max(c, d.codes[base + i * nk + j]);
      }
      const p = 4 * (y * width + x);
      px[p] = RAMP[3 * c]; px[p + 1] = RAMP[3 * c + 1]; px[p + 2] = RAMP[3 * c + 2]; px[p + 3] = 255;
    }
  }
  ctx.putImageData(img, 0, 0);
}

// The difference map: one block of `cell` pixels per (query, key), token labels when they fit,
// the highlighted query row or key column outlined.
function drawDifference(canvas, diff, highlight) {
  const { nq, nk, values, scale } = diff, qt = tokensOf(diff.queries), kt = tokensOf(diff.keys);
  const cell = Math.max(1, Math.min(22, Math.floor(400 / Math.max(nq, nk))));
  const labels = cell >= 9, ctx0 = canvas.getContext("2d");
  ctx0.font = "11px system-ui, sans-serif";
  const widest = (ts) => Math.ceil(Math.max(...ts.map((t) => ctx0.measureText(t).width))) + 6;
  const left = labels ? widest(qt) : 0, top = labels ? widest(kt) : 0;
  canvas.width = left + nk * cell; canvas.height = top + nq * cell;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  const img = ctx.createImageData(nk * cell, nq * cell), px = img.data;
  for (let i = 0; i < nq; i++) {
    for (let j = 0; j < nk; j++) {
      const [r, g, b] = divergingColor(values[i * nk + j], scale);
      for (let y = i * cell; y < (i + 1) * cell; y++) {
        for (let x = j * cell; x < (j + 1) * cell; x++) {
          const p = 4 * (y * nk * cell + x);
          px[p] = r; px[p + 1] = g; px[p + 2] = b; px[p + 3] = 255;
        }
      }
    }
  }
  ctx.putImageData(img, left, top);
  if (labels) {
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#333";
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    qt.forEach((t, i) => ctx.fillText(t, left - 3, top + (i + 0.5) * cell));
    ctx.save();
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    kt.forEach((t, j) => ctx.fillText(t, -top + 3, left + (j + 0.5) * cell));
    ctx.restore();
  }
  if (highlight) {
    ctx.strokeStyle = "#000";
    ctx.lineWidth = 1;
    if (highlight.side === "q" && highlight.index < nq) ctx.strokeRect(left + 0.5, top + highlight.index * cell + 0.5,
                                                                      nk * cell - 1, cell - 1);
    if (highlight.side === "k" && highlight.index < nk) ctx.strokeRect(left + highlight.index * cell + 0.5, top + 0.5,
                                                                      cell - 1, nq * cell - 1);
  }
  return { x0: left, y0: top, cell };  // where the map's first cell is drawn
}

function drawScaleBar(canvas) {  // −scale (left) ... 0 ... +scale (right)
  const ctx = canvas.getContext("2d"), img = ctx.createImageData(256, 1);
  for (let x = 0; x < 256; x++) {
    const [r, g, b] = divergingColor((x - 127.5) / 127.5, 1);
    img.data.set([r, g, b, 255], 4 * x);
  }
  ctx.putImageData(img, 0, 0);
}
