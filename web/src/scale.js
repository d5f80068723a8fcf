// Pure helpers of the charts' colour scales (no DOM: also run by the tests in node).

const TOP_PERCENTILE = 0.99;
const TOP_BINS = 1024;

/**
 * The value the colour ramp tops out at: the 99th percentile of the samples shown
 * (from a histogram: linear time), so that one spike does not darken every other
 * cell; and the maximum.
 * @param {Float64Array[]} values @param {number} from @param {number} n @param {number} size
 * @returns {{top: number, max: number}}
 */
export function colourTop(values, from, n, size) {
  let max = 0;
  let count = 0;
  for (const col of values) for (let i = 0; i < n; i++) {
    const v = col[(from + i) % size];
    if (v > 0) count += 1;
    if (v > max) max = v;
  }
  if (max <= 0) return { top: 0, max: 0 };
  const bins = new Uint32Array(TOP_BINS);
  for (const col of values) for (let i = 0; i < n; i++) {
    const v = col[(from + i) % size];
    if (v > 0) bins[Math.min(TOP_BINS - 1, Math.floor((v / max) * TOP_BINS))] += 1;
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
  let top = 0; // the largest value in the percentile's bin
  for (const col of values) for (let i = 0; i < n; i++) {
    const v = col[(from + i) % size];
    if (v > top && Math.min(TOP_BINS - 1, Math.floor((v / max) * TOP_BINS)) === bin) top = v;
  }
  return { top, max };
}
