// The transfer page's caps panel: the cwnd cap (segments) the equalizer has set on each
// stream, as its samples report it (the page's telemetry store), one line per stream;
// each change of a cap is an equalizer event, ticked in orange.

import { h } from '../../dom.js';
import { StreamChart } from './stream-chart.js';

/** @typedef {import('./stream-chart.js').Marks} Marks */

export class CapsPanel extends StreamChart {
  /** @param {Marks} marks */
  constructor(marks) {
    const box = h('div', { id: 'chart-cap', class: 'chart' });
    super(box, 'cap', { title: 'cap', unit: (v) => `${+v.toFixed(0)} seg`, axis: (v) => `${+v.toFixed(0)}`, marks });
    this.hint = h('p', { class: 'hint' }, 'The cap in force per stream (segments), from the samples; each cap change is an equalizer event (orange ticks).');
  }
}
