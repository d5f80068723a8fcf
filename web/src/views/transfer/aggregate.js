// The transfer page's Aggregate panel: the sum of the streams' acknowledged rates
// (bit/s, from the page's telemetry store) against the bottleneck: the sum of the
// capacities (GET /links) of the links the transfer and its legs go over.

import { TimeChart } from '../../charts.js';
import { h } from '../../dom.js';
import * as fmt from '../../format.js';
import { Frame } from '../../telemetry.js';

/** @typedef {import('./stream-chart.js').Marks} Marks */
/** @typedef {import('../../telemetry.js').TelemetryStore} TelemetryStore */

/**
 * The sum of the capacities of the links of transfer `t` and its legs (0 when none is known).
 * @param {any} t @param {Map<string, any>} links by id
 */
export function bottleneck(t, links) {
  if (!t) return 0;
  const ids = new Set([...t.paths, ...t.legs.flatMap((/** @type {any} */ l) => l.paths)]);
  let sum = 0;
  for (const lid of ids) sum += links.get(lid)?.capacity_bps ?? 0;
  return sum;
}

export class AggregatePanel {
  /** @param {Marks} marks @param {() => number} limit the bottleneck (bit/s), 0 when unknown */
  constructor(marks, limit) {
    this.limit = limit;
    this.hint = h('p', { class: 'hint' }, 'Sum of the streams\u2019 acknowledged rates; the dashed line is the bottleneck: the sum of the capacities of the transfer\u2019s links.');
    this.box = h('div', { id: 'chart-aggregate', class: 'chart' });
    this.chart = new TimeChart(this.box, { title: 'aggregate', unit: fmt.rate, axis: fmt.rateShort, marks });
    this.frame = new Frame();
  }

  /** @param {TelemetryStore} store */
  draw(store) {
    const x = this.frame.times(store);
    const limit = this.limit();
    this.chart.draw(
      [
        { label: 'aggregate', stroke: '#1f5fbf', width: 2 },
        { label: `bottleneck ${fmt.rate(limit)}`, stroke: '#c0392b', width: 1.5, dash: [6, 4] },
      ],
      [x, this.frame.sum(store, 'bps'), x.map(() => limit || null)],
    );
  }

  resize() {
    this.chart.resize();
  }

  destroy() {
    this.chart.destroy();
  }
}
