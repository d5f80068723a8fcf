// The transfer page's cwnd and RTT panels: each stream's congestion window (bytes) and
// round-trip time (ms) from its samples (TCP_INFO, via the page's telemetry store), one
// line per stream, with the event ticks.

import { h } from '../../dom.js';
import * as fmt from '../../format.js';
import { StreamChart } from './stream-chart.js';

/** @typedef {import('./stream-chart.js').Marks} Marks */

export class CwndPanel extends StreamChart {
  /** @param {Marks} marks */
  constructor(marks) {
    super(h('div', { id: 'chart-cwnd', class: 'chart' }), 'cwnd', { title: 'cwnd', unit: fmt.bytes, marks });
  }
}

export class RttPanel extends StreamChart {
  /** @param {Marks} marks */
  constructor(marks) {
    super(h('div', { id: 'chart-rtt', class: 'chart' }), 'rtt', { title: 'rtt', unit: (v) => `${+v.toFixed(1)} ms`, marks });
  }
}
