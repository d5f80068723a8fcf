// uPlot charts of the transfer page: one line per stream (readable at 64 streams:
// thin lines, the stream under the cursor highlighted and named in a readout, the
// others dimmed), the aggregate with the bottleneck line, and event annotations
// (equalizer cap changes and others) drawn as vertical ticks on every timeline.

import uPlot from './vendor/uPlot.esm.js';
import { h } from './dom.js';
import { colourTop } from './scale.js';

/** A distinct colour per stream: golden-angle hues, alternating lightness. */
export function streamColor(/** @type {number} */ i) {
  const hue = (i * 137.508) % 360;
  return `hsl(${hue.toFixed(1)}, 70%, ${i % 2 ? 38 : 48}%)`;
}

/** Time axis steps (seconds): whole seconds and up, never the 0.5 s of the slots. */
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];

export const MARK_COLORS = {
  equalizer: 'rgba(230, 120, 0, 0.55)',
  path: 'rgba(150, 40, 200, 0.8)',
  other: 'rgba(90, 90, 90, 0.5)',
};

/**
 * Vertical ticks at event times: `marks()` returns [{t, kind}] (seconds).
 * @param {() => {t: number, kind: string}[]} marks
 */
function annotations(marks) {
  return {
    hooks: {
      /** @param {uPlot} u */
      draw(u) {
        const { ctx, bbox } = u;
        const [min, max] = [u.scales.x.min ?? 0, u.scales.x.max ?? 0];
        ctx.save();
        ctx.lineWidth = Math.max(1, devicePixelRatio);
        let lastX = -1;
        let lastKind = '';
        for (const m of marks()) {
          if (m.t < min || m.t > max) continue;
          const x = Math.round(u.valToPos(m.t, 'x', true));
          if (x === lastX && m.kind === lastKind) continue; // one tick per pixel and kind
          lastX = x;
          lastKind = m.kind;
          ctx.strokeStyle = MARK_COLORS[/** @type {keyof MARK_COLORS} */ (m.kind)] ?? MARK_COLORS.other;
          ctx.beginPath();
          ctx.moveTo(x, bbox.top);
          ctx.lineTo(x, bbox.top + bbox.height);
          ctx.stroke();
        }
        ctx.restore();
      },
    },
  };
}

/** @param {number} min @param {number} max @returns {[number, number]} */
function fromZero(_u, min, max) {
  return [0, max > 0 ? max * 1.08 : 1];
}

/**
 * A chart with one line per stream, or several named lines (the aggregate).
 */
export class TimeChart {
  /**
   * @param {HTMLElement} host where the chart goes
   * @param {{title: string, unit: (v: number) => string, axis?: (v: number) => string,
   *   marks: () => {t: number, kind: string}[], height?: number}} options
   */
  constructor(host, options) {
    this.host = host;
    this.options = options;
    this.readout = h('div', { class: 'readout' }, '\u00a0');
    this.box = h('div', { class: 'chart-box' });
    host.append(this.readout, this.box);
    /** @type {uPlot | null} */ this.plot = null;
    /** @type {{label: string, stroke: string, width?: number, dash?: number[]}[]} */
    this.series = [];
    this.focused = -1;
  }

  /**
   * Draws `data` ([x, ...ys]); rebuilds the chart when the series changed.
   * @param {{label: string, stroke: string, width?: number, dash?: number[]}[]} series
   * @param {any[]} data
   */
  draw(series, data) {
    const same =
      this.plot &&
      series.length === this.series.length &&
      series.every((s, i) => s.label === this.series[i].label);
    if (!same) this.build(series, data);
    else this.plot?.setData(/** @type {uPlot.AlignedData} */ (data));
  }

  /** @param {{label: string, stroke: string, width?: number, dash?: number[]}[]} series @param {any[]} data */
  build(series, data) {
    this.plot?.destroy();
    this.series = series;
    const { unit, marks, height = 220 } = this.options;
    const axis = this.options.axis ?? unit;
    /** @type {uPlot.Options} */
    const opts = {
      width: this.width(),
      height,
      legend: { show: false },
      focus: { alpha: 0.25 },
      cursor: { focus: { prox: 24 }, points: { size: 5 }, drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: fromZero } },
      axes: [
        { stroke: '#555', grid: { stroke: '#eee' }, incrs: TIME_STEPS, space: 70 },
        { stroke: '#555', grid: { stroke: '#eee' }, size: 76, values: (_u, vals) => vals.map(axis) },
      ],
      series: [
        {},
        ...series.map((s) => ({
          label: s.label,
          stroke: s.stroke,
          width: s.width ?? 1,
          dash: s.dash,
          spanGaps: true,
          points: { show: false },
        })),
      ],
      plugins: [annotations(marks)],
      hooks: {
        setSeries: [
          (_u, idx) => {
            this.focused = idx ?? -1;
            this.showReadout();
          },
        ],
        setCursor: [() => this.showReadout()],
      },
    };
    this.plot = new uPlot(opts, /** @type {uPlot.AlignedData} */ (data), this.box);
  }

  showReadout() {
    const u = this.plot;
    if (!u) return;
    const i = u.cursor.idx;
    if (i === null || i === undefined) {
      this.readout.textContent = '\u00a0';
      return;
    }
    const t = new Date(/** @type {number} */ (u.data[0][i]) * 1000).toLocaleTimeString();
    const parts = [t];
    if (this.focused > 0 && this.focused <= this.series.length) {
      const v = u.data[this.focused][i];
      parts.push(`${this.series[this.focused - 1].label}: ${v === null ? '–' : this.options.unit(/** @type {number} */ (v))}`);
    }
    if (this.series.length > 3) {
      const values = u.data.slice(1).map((y) => y[i]).filter((v) => v !== null && v !== undefined);
      if (values.length) {
        const sorted = /** @type {number[]} */ (values).sort((a, b) => a - b);
        const mid = sorted[Math.floor(sorted.length / 2)];
        parts.push(
          `${values.length} streams: min ${this.options.unit(sorted[0])}, median ${this.options.unit(mid)}, max ${this.options.unit(sorted[sorted.length - 1])}`,
        );
      }
    } else {
      u.data.slice(1).forEach((y, j) => {
        const v = y[i];
        parts.push(`${this.series[j].label}: ${v === null || v === undefined ? '–' : this.options.unit(/** @type {number} */ (v))}`);
      });
    }
    this.readout.textContent = parts.join(' · ');
  }

  width() {
    return Math.max(320, this.host.clientWidth - 4);
  }

  resize() {
    this.plot?.setSize({ width: this.width(), height: this.options.height ?? 220 });
  }

  /** Points in the chart's data (x values). */
  length() {
    return this.plot ? this.plot.data[0].length : 0;
  }

  destroy() {
    this.plot?.destroy();
    this.plot = null;
  }
}

const CARRY_SLOTS = 4; // 2 s of 0.5 s slots
const VIRIDIS = ['#440154', '#3b528b', '#21918c', '#5ec962', '#fde725'];

/** 256 RGBA entries from dark (low) to yellow (high). */
function ramp() {
  const rgb = VIRIDIS.map((c) => [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16)));
  const out = new Uint8ClampedArray(256 * 4);
  for (let i = 0; i < 256; i++) {
    const x = (i / 255) * (rgb.length - 1);
    const k = Math.min(rgb.length - 2, Math.floor(x));
    const f = x - k;
    for (let c = 0; c < 3; c++) out[i * 4 + c] = rgb[k][c] + f * (rgb[k + 1][c] - rgb[k][c]);
    out[i * 4 + 3] = 255;
  }
  return out;
}

/**
 * One row per stream, one column per time slot, the colour the value: at 64 streams a
 * heatmap shows which stream is slow, and when, where 64 lines overlap.
 */
export class Heatmap {
  /** @param {HTMLElement} host @param {{unit: (v: number) => string}} options */
  constructor(host, options) {
    this.options = options;
    this.colors = ramp();
    this.grey = new Uint32Array(new Uint8ClampedArray([236, 236, 236, 255]).buffer)[0];
    /** @type {ImageData | null} */ this.image = null;
    this.canvas = /** @type {HTMLCanvasElement} */ (h('canvas', { class: 'heatmap' }));
    this.off = document.createElement('canvas');
    this.readout = h('div', { class: 'readout' }, '\u00a0');
    this.scale = h('div', { class: 'heat-scale' });
    host.append(this.readout, this.canvas, this.scale);
    /** @type {{labels: string[], from: number, n: number, dt: number, values: Float64Array[], size: number, gutter: number, row: number} | null} */
    this.view = null;
    this.canvas.addEventListener('mousemove', (ev) => this.hover(ev));
    this.canvas.addEventListener('mouseleave', () => {
      this.readout.textContent = '\u00a0';
    });
  }

  /** @param {import('./telemetry.js').TelemetryStore} store @param {string} metric */
  draw(store, metric) {
    const { from, to } = store.range();
    const n = Math.max(0, to - from + 1);
    const rows = store.list.length;
    if (!n || !rows) return;
    const values = store.list.map((s) => s.cols[metric]);
    const { top, max } = colourTop(values, from, n, store.size);
    if (this.off.width !== n || this.off.height !== rows) {
      this.off.width = n;
      this.off.height = rows;
    }
    const octx = /** @type {CanvasRenderingContext2D} */ (this.off.getContext('2d'));
    if (!this.image || this.image.width !== n || this.image.height !== rows) {
      this.image = octx.createImageData(n, rows);
    }
    const img = this.image;
    const pixels = new Uint32Array(img.data.buffer); // one RGBA pixel per element
    const colors = new Uint32Array(this.colors.buffer);
    const scale = top > 0 ? 255 / top : 0;
    const grey = this.grey;
    const size = store.size;
    for (let j = 0; j < rows; j++) {
      const col = values[j];
      const row = j * n;
      let last = NaN;
      let age = Infinity;
      let slot = from % size;
      for (let i = 0; i < n; i++) {
        const v = col[slot];
        slot = slot + 1 === size ? 0 : slot + 1;
        if (v === v) {
          last = v;
          age = 0;
        } else age += 1;
        // a slot missed by sampling jitter takes the stream's last value (up to 2 s):
        // grey is a stream silent for longer
        if (age > CARRY_SLOTS || last !== last) pixels[row + i] = grey;
        else {
          const level = (last > 0 ? last : 0) * scale + 0.5;
          pixels[row + i] = colors[level < 255 ? level | 0 : 255];
        }
      }
    }
    octx.putImageData(img, 0, 0);
    const row = Math.max(3, Math.min(12, Math.floor(360 / rows)));
    const gutter = 110;
    const width = Math.max(320, (this.canvas.parentElement?.clientWidth ?? 800) - 4);
    const height = rows * row;
    const dpr = devicePixelRatio || 1;
    if (this.canvas.width !== Math.round(width * dpr) || this.canvas.height !== Math.round(height * dpr)) {
      this.canvas.width = Math.round(width * dpr);
      this.canvas.height = Math.round(height * dpr);
      this.canvas.style.width = `${width}px`;
      this.canvas.style.height = `${height}px`;
    }
    const ctx = /** @type {CanvasRenderingContext2D} */ (this.canvas.getContext('2d'));
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(this.off, 0, 0, n, rows, gutter, 0, width - gutter, height);
    const labels = store.list.map((s) => s.label);
    if (row >= 8) {
      ctx.fillStyle = '#444';
      ctx.font = `${Math.min(11, row)}px system-ui, sans-serif`;
      ctx.textBaseline = 'middle';
      labels.forEach((label, j) => ctx.fillText(label, 2, j * row + row / 2));
    } else {
      ctx.fillStyle = '#444';
      ctx.font = '10px system-ui, sans-serif';
      ctx.fillText(`${rows} streams`, 2, 10);
    }
    this.view = { labels, from, n, dt: store.dt, values, size: store.size, gutter, row };
    const start = new Date(from * store.dt * 1000).toLocaleTimeString();
    const end = new Date((to + 1) * store.dt * 1000).toLocaleTimeString();
    const clipped = top < max ? ` (the 99th percentile; peaks up to ${this.options.unit(max)} are yellow too)` : '';
    this.scale.textContent = `${start} → ${end} · colour: 0 (dark) to ${this.options.unit(top)} (yellow)${clipped} · grey: no sample for 2 s`;
  }

  resize() {} // the next draw() fits the width

  destroy() {
    this.view = null;
  }

  /** @param {MouseEvent} ev */
  hover(ev) {
    const v = this.view;
    if (!v) return;
    const rect = this.canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left - v.gutter;
    const j = Math.floor((ev.clientY - rect.top) / v.row);
    if (x < 0 || j < 0 || j >= v.labels.length) return;
    const i = Math.min(v.n - 1, Math.floor((x / (rect.width - v.gutter)) * v.n));
    const value = v.values[j][(v.from + i) % v.size];
    const t = new Date((v.from + i) * v.dt * 1000).toLocaleTimeString();
    this.readout.textContent = `${v.labels[j]} at ${t}: ${Number.isNaN(value) ? 'no sample' : this.options.unit(value)}`;
  }
}
