// The transfer page's head: the transfer's state, rate and ETA (from done_bytes between
// two looks), a line for each leg that waits to be resumed or failed, its progress, its settings (the links named from GET /links) and the
// actions its state allows: pause, resume, cancel (POST /transfers/{id}/{verb}, whose
// answer is the transfer's new view).

import { api, Unauthorized } from '../../api.js';
import { fill, h } from '../../dom.js';
import * as fmt from '../../format.js';
import { progressBar, stateBadge } from '../transfers.js';

export class HeadPanel {
  /**
   * @param {string} id the transfer
   * @param {Map<string, any>} links by id
   * @param {(t: any) => void} changed takes an action's answer: the transfer as it is now
   */
  constructor(id, links, changed) {
    this.id = id;
    this.links = links;
    this.changed = changed;
    this.meter = new fmt.RateMeter();
    this.headline = h('div', { class: 'headline' });
    this.troubles = h('div', { id: 'leg-troubles' });
    this.progress = h('div', { id: 'progress' });
    this.settings = h('p', { class: 'settings' });
    this.actions = h('div', { class: 'actions' });
    this.actionError = h('p', { class: 'error' });
    this.box = h(
      'section',
      { class: 'panel head' },
      h('a', { href: '#/transfers', class: 'back' }, '← Transfers'),
      h('h1', null, `Transfer ${fmt.shortId(id)}`),
      this.headline,
      this.troubles,
      this.progress,
      this.settings,
      this.actions,
      this.actionError,
    );
  }

  /** @param {any} t the transfer */
  render(t) {
    const bps = t.state === 'running' ? this.meter.update(t.done_bytes) : null;
    const eta = t.state === 'running' ? this.meter.eta(t.done_bytes, t.total_bytes) : null;
    fill(
      this.headline,
      stateBadge(t.state),
      h('span', { class: 'figure', id: 'rate' }, `rate ${t.state === 'running' ? fmt.rate(bps) : '–'}`),
      h('span', { class: 'figure', id: 'eta' }, `ETA ${t.state === 'running' ? fmt.duration(eta) : '–'}`),
      t.last_error ? h('span', { class: 'error' }, t.last_error) : null,
    );
    fill(this.troubles, ...fmt.legTroubles(t).map((line) => h('p', { class: 'error small' }, line)));
    this.progress.dataset.done = String(t.done_bytes);
    this.progress.dataset.total = String(t.total_bytes);
    this.progress.dataset.state = t.state;
    fill(this.progress, progressBar(t.done_bytes, t.total_bytes));
    const pathNames = (t.paths ?? []).map((/** @type {string} */ p) => this.links.get(p)?.name ?? fmt.shortId(p));
    fill(
      this.settings,
      `${t.legs.length} leg(s) × ${t.streams_per_pair} streams · links: ${pathNames.join(', ') || 'none (agents\u2019 addresses)'} · pacing ${t.pacing?.policy ?? '?'} (margin ${((t.pacing?.margin ?? 0) * 100).toFixed(0)}%) · equalizer ${t.equalizer ? 'on' : 'off'} · verify ${fmt.verification(t)} · created ${fmt.when(t.created_at)}`,
    );
    const act = (/** @type {string} */ verb, /** @type {string[]} */ from) =>
      from.includes(t.state)
        ? h('button', { type: 'button', dataset: { action: verb }, onclick: () => this.act(verb) }, verb)
        : null;
    fill(this.actions, act('pause', ['queued', 'running']), act('resume', ['paused', 'failed']), act('cancel', ['queued', 'running', 'paused', 'failed']));
  }

  /** @param {string} verb */
  async act(verb) {
    this.actionError.textContent = '';
    try {
      this.changed(await api(`/transfers/${encodeURIComponent(this.id)}/${verb}`, { method: 'POST' }));
    } catch (e) {
      if (!(e instanceof Unauthorized)) this.actionError.textContent = `${verb}: ${e}`;
    }
  }
}
