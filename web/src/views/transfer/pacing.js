// The transfer page's Per-NIC pacing panel: the rates the transfer's source agents
// report applying to their NICs (GET /transfers/{id}/pacing, every 2 s while the
// transfer runs), as a table of the last ones and their history on a chart.

import { api, Unauthorized } from '../../api.js';
import { streamColor, TimeChart } from '../../charts.js';
import { fill, h, table } from '../../dom.js';
import * as fmt from '../../format.js';
import { FINAL } from '../transfers.js';

const PACING_MS = 2000;
const PACING_POINTS = 600; // 20 minutes of looks every 2 s

/** @typedef {{agent: string, nic: string, rate_bytes_per_second: number, updated_at: string}} NicRate */

/** `agent:nic`, how the table and the chart name a NIC. @param {NicRate} r */
const nicName = (r) => `${r.agent}:${r.nic}`;

export class PacingPanel {
  /**
   * @param {string} id the transfer
   * @param {() => any} transfer the page's latest view of it (policy, state)
   * @param {AbortSignal} signal aborted when the page goes
   */
  constructor(id, transfer, signal) {
    this.id = id;
    this.transfer = transfer;
    this.signal = signal;
    this.stopped = false;
    /** @type {ReturnType<typeof setTimeout> | undefined} */ this.timer = undefined;
    this.box = h('div', { id: 'pacing', dataset: { available: 'unknown' } }, 'Reading the pacing rates…');
    this.chartBox = h('div', { id: 'chart-pacing', class: 'chart' });
    this.chart = new TimeChart(this.chartBox, { title: 'pacing', unit: fmt.rate, axis: fmt.rateShort, marks: () => [], height: 160 });
    /** @type {number[]} */ this.x = [];
    /** @type {Map<string, (number | null)[]>} */ this.nics = new Map();
    /** @type {NicRate[]} */ this.last = [];
  }

  start() {
    this.poll();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    this.chart.destroy();
  }

  resize() {
    this.chart.resize();
  }

  async poll() {
    try {
      const rows = /** @type {NicRate[]} */ (await api(`/transfers/${encodeURIComponent(this.id)}/pacing`, { signal: this.signal }));
      if (this.stopped) return;
      this.record(rows);
      this.render(null);
    } catch (e) {
      if (this.stopped || e instanceof Unauthorized) return;
      this.render(e);
    }
    const transfer = this.transfer();
    if (!this.stopped && !(transfer && FINAL.has(transfer.state))) this.timer = setTimeout(() => this.poll(), PACING_MS);
    else this.render(null);
  }

  /** @param {NicRate[]} rows */
  record(rows) {
    if (!rows.length) return;
    this.last = rows;
    const at = this.x.length;
    this.x.push(Date.now() / 1000);
    for (const r of rows) {
      const key = nicName(r);
      if (!this.nics.has(key)) this.nics.set(key, new Array(at).fill(null));
    }
    for (const [key, ys] of this.nics) {
      const row = rows.find((r) => nicName(r) === key);
      ys.push(row ? row.rate_bytes_per_second * 8 : null);
    }
    if (this.x.length > PACING_POINTS) {
      this.x.shift();
      for (const ys of this.nics.values()) ys.shift();
    }
  }

  /** @param {unknown} error */
  render(error) {
    const transfer = this.transfer();
    const policy = transfer?.pacing?.policy ?? '?';
    const final = transfer && FINAL.has(transfer.state);
    if (error) {
      this.box.dataset.available = 'error';
      fill(this.box, h('p', { class: 'error' }, `Could not read the pacing rates: ${error}`));
      return;
    }
    if (!this.last.length) {
      this.box.dataset.available = 'none';
      fill(
        this.box,
        h('p', null, final ? 'No per-NIC pacing rates were reported while this page watched the transfer.' : `No per-NIC pacing rate reported for this transfer (pacing policy: ${policy}).`),
        h('p', { class: 'hint' }, 'The rates the source agents report applying to their NICs (GET /transfers/{id}/pacing). Nothing is shown rather than a guess.'),
      );
      return;
    }
    this.box.dataset.available = 'true';
    fill(
      this.box,
      table(['NIC', 'Pacing rate', 'Bytes/s'], this.last.map((r) => h('tr', { dataset: { nic: nicName(r) } }, h('td', null, nicName(r)), h('td', { class: 'num' }, fmt.rate(r.rate_bytes_per_second * 8)), h('td', { class: 'num' }, `${fmt.bytes(r.rate_bytes_per_second)}/s`))), { class: 'compact' }),
      h('p', { class: 'hint' }, final ? 'The transfer ended: the last rates its agents reported, and their history while this page was open.' : `Every ${PACING_MS / 1000} s, as the source agents report them (policy ${policy}).`),
    );
    const keys = [...this.nics.keys()];
    this.chart.draw(keys.map((k, i) => ({ label: k, stroke: streamColor(i), width: 1.5 })), [this.x, ...keys.map((k) => /** @type {(number | null)[]} */ (this.nics.get(k)))]);
  }
}
