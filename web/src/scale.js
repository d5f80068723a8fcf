// Pure helpers of the charts' colour scales (no DOM: also run by the tests in node).

const TOP_PERCENTILE = 0.99;
const TOP_BINS = 1024;
const TOP_SAMPLE = 8192; // values the percentile is taken over, evenly spread

/**
 * The value the colour ramp tops out at: the 99th percentile of the samples shown
 * (from a histogram of at most TOP_SAMPLE of them, evenly spread: the heatmap redraws
 * 64 x 1200 cells several times a second), so that one spike does not darken every
 * other cell; and the maximum (of all of them).
 * @param {Float64Array[]} values @param {number} from @param {number} n @param {number} size
 * @returns {{top: number, max: number}}
 */
export function colourTop(values, from, n, size) {
  let max = 0;
  const first = from % size;
  const wrap = Math.min(n, size - first); // the window is col[first..first+wrap) then col[0..n-wrap)
  for (const col of values) {
    for (let i = first; i < first + wrap; i++) if (col[i] > max) max = col[i];
    for (let i = 0; i < n - wrap; i++) if (col[i] > max) max = col[i];
  }
  if (max <= 0) return { top: 0, max: 0 };
  const cells = n * values.length;
  const stride = Math.max(1, Math.floor(cells / TOP_SAMPLE));
  const at = (/** @type {number} */ k) => values[Math.floor(k / n)][(from + (k % n)) % size];
  const binOf = (/** @type {number} */ v) => Math.min(TOP_BINS - 1, Math.floor((v / max) * TOP_BINS));
  const bins = new Uint32Array(TOP_BINS);
  let count = 0;
  for (let k = 0; k < cells; k += stride) {
    const v = at(k);
    if (v > 0) {
      bins[binOf(v)] += 1;
      count += 1;
    }
  }
  const wanted = Math.ceil(count * TOP_PERCENTILE);
  let seen = 0;
  let bin = TOP_BINS - 1;
  for (let b = 0; b < TOP_BINS; b++) {
    seen += bins[b];
    if (seen >= wanted) {
      bin = b;
      break;
    }
  }
  let top = 0; // the largest sampled value in the percentile's bin
  for (let k = 0; k < cells; k += stride) {
    const v = at(k);
    if (v > top && binOf(v) === bin) top = v;
  }
  return { top, max };
}
