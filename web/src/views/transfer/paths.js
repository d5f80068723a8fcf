// The transfer page's Paths panel: per path id (the streams' "LOCAL=REMOTE:PORT", named
// by the link whose NIC has the local address: GET /links and /agents), whether it
// carries bytes, from the streams' samples (the page's telemetry store), its rate,
// median RTT and retransmits; and the transfer's last 20 path events.

import { fill, h, table } from '../../dom.js';
import * as fmt from '../../format.js';

/** @typedef {import('../../telemetry.js').TelemetryStore} TelemetryStore */
/** @typedef {import('../../telemetry.js').Stream} Stream */

/**
 * The link a path id ("LOCAL=REMOTE:PORT") goes over, by its NICs' addresses.
 * @param {string | null} path @param {Map<string, any>} links by id @param {Map<string, any>} agents by id
 */
export function pathName(path, links, agents) {
  if (!path) return '–';
  const local = path.split('=')[0];
  for (const l of links.values()) {
    const a = agents.get(l.agent_a)?.nics?.find((/** @type {any} */ n) => n.name === l.nic_a)?.address;
    const b = agents.get(l.agent_b)?.nics?.find((/** @type {any} */ n) => n.name === l.nic_b)?.address;
    if (local && (local === a || local === b)) return `${l.name} (${path})`;
  }
  return path;
}

export class PathsPanel {
  /**
   * @param {TelemetryStore} store
   * @param {any[]} events the page's list of events (it adds to it; this reads it)
   * @param {(path: string | null) => string} name how a path id is shown
   */
  constructor(store, events, name) {
    this.store = store;
    this.events = events;
    this.name = name;
    this.box = h('div', { id: 'paths' });
  }

  /** @param {boolean} running whether the transfer runs (a path without samples is then silent, not idle) */
  render(running) {
    const newest = this.store.newestTime();
    /** @type {Map<string, Stream[]>} */
    const byPath = new Map();
    for (const s of this.store.list) {
      const key = s.path ?? '';
      byPath.set(key, [...(byPath.get(key) ?? []), s]);
    }
    const rows = [...byPath.entries()].map(([path, streams]) => {
      const fresh = streams.filter((s) => newest !== null && s.lastTime >= newest - 3);
      const bps = fresh.reduce((sum, s) => sum + (s.last?.bits_per_second ?? 0), 0);
      const rtts = fresh.map((s) => s.last?.rtt).filter((v) => v).sort((a, b) => (a ?? 0) - (b ?? 0));
      const rtt = rtts.length ? /** @type {number} */ (rtts[Math.floor(rtts.length / 2)]) / 1000 : null;
      const retrans = streams.reduce((sum, s) => sum + s.retransmits, 0);
      let state = 'idle';
      if (running) state = !fresh.length ? 'silent' : bps > 0 ? 'carrying' : 'stalled';
      return h(
        'tr',
        { dataset: { path, state } },
        h('td', { class: 'mono' }, path ? this.name(path) : '(no path id)'),
        h('td', null, h('span', { class: `badge path-${state}` }, state)),
        h('td', { class: 'num' }, `${fresh.length}/${streams.length}`),
        h('td', { class: 'num' }, fmt.rate(bps)),
        h('td', { class: 'num' }, rtt === null ? '–' : `${rtt.toFixed(1)} ms`),
        h('td', { class: 'num' }, retrans),
      );
    });
    const pathEvents = this.events.filter((e) => e.kind.includes('path')).slice(-20).reverse();
    fill(
      this.box,
      rows.length ? table(['Path', 'State', 'Streams (fresh/all)', 'Rate', 'RTT (median)', 'Retransmits'], rows, { class: 'compact' }) : h('p', { class: 'empty' }, 'No samples yet.'),
      h('p', { class: 'hint' }, 'State from the samples: carrying (bytes acknowledged in the last 3 s), stalled (samples, no bytes), silent (no sample for 3 s while the transfer runs).'),
      pathEvents.length
        ? table(['Time', 'Path event'], pathEvents.map((e) => h('tr', null, h('td', null, fmt.when(e.at)), h('td', null, e.detail))), { class: 'compact' })
        : h('p', { class: 'hint' }, 'No path events for this transfer.'),
    );
  }
}
