// The transfer page's heatmap panel: each stream's throughput (bit/s) from its samples
// (the page's telemetry store), one row per stream and one column per half second, so a
// slow or silent stream stands out at any stream count.

import { Heatmap } from '../../charts.js';
import { h } from '../../dom.js';
import * as fmt from '../../format.js';

/** @typedef {import('../../telemetry.js').TelemetryStore} TelemetryStore */

export class HeatmapPanel {
  constructor() {
    this.hint = h('p', { class: 'hint' }, 'One row per stream, one column per half second: a slow or silent stream stands out at any stream count. Hover for its value.');
    this.box = h('div', { id: 'heatmap', class: 'chart' });
    this.chart = new Heatmap(this.box, { unit: fmt.rate });
  }

  /** @param {TelemetryStore} store */
  draw(store) {
    this.chart.draw(store, 'bps');
  }

  resize() {
    this.chart.resize();
  }

  destroy() {
    this.chart.destroy();
  }
}
