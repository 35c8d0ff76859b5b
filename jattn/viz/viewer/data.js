// jattn attention viewer, part 1 of 3: the page's data. The JSON block #jattn-data is written
// by jattn/viz/view.py: per model ("views", and "compare.views" for a second one), per attention
// type, per measure, 8-bit codes relative to each query row's largest share (rows sum to 1),
// zlib-compressed and base64-encoded, with the row maxima and raw row sums as float32.
"use strict";

const $ = (id) => document.getElementById(id);
const DATA = JSON.parse($("jattn-data").textContent);
// The models a panel can show: the first, and the second when the page compares two.
const SOURCES = [{ name: DATA.model, views: DATA.views }]
  .concat(DATA.compare ? [{ name: DATA.compare.model, views: DATA.compare.views }] : []);
const decoded = new Map();  // "source/view/measure" -> {codes, share, rowMax, rowSum}

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

const viewOf = (source, view) => SOURCES[source].views[view];
const measureOf = (v, key) => v.measures.find((m) => m.key === key);
const tokensOf = (side) => DATA.tokens[side];

function dims(m) {  // (L, H or 0, nq, nk)
  const s = m.shape;
  return m.per_head ? [s[0], s[1], s[2], s[3]] : [s[0], 0, s[1], s[2]];
}

function layersHeads(source, view) {  // the model's (L, H) for this attention type
  const [L, H] = dims(measureOf(viewOf(source, view), "alpha"));
  return [L, H];
}

async function load(source, view, key) {  // -> {codes, share (Float32Array, rows sum to 1), rowMax, rowSum}
  const v = viewOf(source, view), m = measureOf(v, key), id = `${source}/${v.name}/${key}`;
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

function share(m, d, l, h, i, j) {  // the decoded share (bounds: jattn/viz/view_codes.py)
  return d.share[rowIndex(m, l, h, i) * dims(m)[3] + j];
}

function rawValue(m, d, l, h, i, j) {
  return share(m, d, l, h, i, j) * d.rowSum[rowIndex(m, l, h, i)];
}

const fmt = (x) => (Math.abs(x) >= 1000 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : x.toFixed(4));
