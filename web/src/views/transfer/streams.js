// The transfer page's Throughput per stream panel: each stream's acknowledged rate
// (bit/s) from its samples (the page's telemetry store), one line per stream, with the
// event ticks; above it, the state of the live feed the samples come from. Its box's
// data-* attributes say what it holds (samples, streams, points drawn) and what a frame
// of the page's drawing costs, for the tests and the curious.

import { h } from '../../dom.js';
import * as fmt from '../../format.js';
import { StreamChart } from './stream-chart.js';

/** @typedef {import('./stream-chart.js').Marks} Marks @typedef {import('./stream-chart.js').Series} Series */
/** @typedef {import('../../telemetry.js').TelemetryStore} TelemetryStore */

export class StreamsPanel extends StreamChart {
  /** @param {Marks} marks */
  constructor(marks) {
    const box = h('div', { id: 'chart-streams', class: 'chart', dataset: { points: '0', streams: '0', length: '0' } });
    super(box, 'bps', { title: 'throughput', unit: fmt.rate, axis: fmt.rateShort, marks, height: 280 });
    this.legend = h(
      'p',
      { class: 'hint' },
      'One line per stream. Hover: the nearest stream is highlighted and named. Ticks: ',
      h('span', { class: 'swatch equalizer' }),
      ' equalizer cap changes, ',
      h('span', { class: 'swatch path' }),
      ' path events, ',
      h('span', { class: 'swatch other' }),
      ' other events.',
    );
    this.liveState = h('span', { class: 'live-state', id: 'live-state' }, 'connecting…');
  }

  /** @param {TelemetryStore} store @param {Series} series */
  draw(store, series) {
    super.draw(store, series);
    this.box.dataset.points = String(store.points);
    this.box.dataset.streams = String(store.list.length);
    this.box.dataset.length = String(this.chart.length());
  }

  /** The live feed's state: live, lost (reconnecting) or ended. @param {string} state @param {string} text */
  showFeed(state, text) {
    this.liveState.textContent = text;
    this.liveState.dataset.state = state;
  }

  /** The work of one animation frame (ms): its running mean and its maximum. @param {{mean: number, max: number}} cost */
  showCost(cost) {
    this.box.dataset.drawMs = cost.mean.toFixed(2);
    this.box.dataset.drawMaxMs = cost.max.toFixed(2);
  }
}
