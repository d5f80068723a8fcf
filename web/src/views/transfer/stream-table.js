// The transfer page's Streams table: each stream's last sample (rate, cwnd, RTT, cap,
// what held it back), its path, its retransmits and samples so far, from the page's
// telemetry store; a stream with no sample for 5 s is greyed as stale.

import { streamColor } from '../../charts.js';
import { fill, h, table } from '../../dom.js';
import * as fmt from '../../format.js';

/** @typedef {import('../../telemetry.js').TelemetryStore} TelemetryStore */
/** @typedef {import('../../telemetry.js').Sample} Sample */

/**
 * What held the stream back over its last interval (TCP_INFO): idle (nothing to
 * send), stalled on the receiver's window, stalled on the send buffer; shares of 5%
 * or more, or "–" when the sample does not say.
 * @param {Sample | null} x
 */
export function heldBack(x) {
  if (x?.busy == null) return '–';
  const parts = [['idle', 1 - x.busy], ['rwnd', x.rwnd_limited ?? 0], ['sndbuf', x.sndbuf_limited ?? 0]]
    .filter(([, v]) => /** @type {number} */ (v) >= 0.05)
    .map(([name, v]) => `${name} ${Math.round(/** @type {number} */ (v) * 100)}%`);
  return parts.length ? parts.join(' · ') : 'nothing';
}

export class StreamTable {
  /** @param {TelemetryStore} store @param {(path: string | null) => string} pathName how a path id is shown */
  constructor(store, pathName) {
    this.store = store;
    this.pathName = pathName;
    this.box = h('div', { id: 'stream-table', class: 'scroll' });
  }

  render() {
    const store = this.store;
    const newest = store.newestTime();
    const rows = store.list.map((s, i) => {
      const x = s.last;
      const stale = newest !== null && s.lastTime < newest - 5;
      return h(
        'tr',
        { class: stale ? 'stale' : '' },
        h('td', null, h('span', { class: 'swatch', style: `background: ${streamColor(i)}` }), ` ${s.label}`),
        h('td', { class: 'mono' }, this.pathName(s.path)),
        h('td', { class: 'num' }, fmt.rate(x?.bits_per_second)),
        h('td', { class: 'num' }, fmt.bytes(x?.snd_cwnd)),
        h('td', { class: 'num' }, x?.rtt ? `${(x.rtt / 1000).toFixed(1)} ms` : '–'),
        h('td', { class: 'num' }, x?.cap ?? '–'),
        h('td', { class: 'num' }, s.retransmits),
        h('td', { dataset: { held: heldBack(x) } }, heldBack(x)),
        h('td', { class: 'num' }, s.samples),
      );
    });
    fill(this.box, rows.length ? table(['Stream', 'Path', 'Rate', 'cwnd', 'RTT', 'Cap (seg)', 'Retransmits', 'Held back', 'Samples'], rows, { class: 'compact' }) : h('p', { class: 'empty' }, 'No samples yet.'));
  }
}
