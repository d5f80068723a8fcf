// The transfer page's Events panel: the transfer's events, newest first, with a filter
// by kind and a count per kind.

import { fill, h, table } from '../../dom.js';
import * as fmt from '../../format.js';

const EVENT_ROWS = 300;

/** How an event is ticked on the timelines. @param {string} kind */
export function markKind(kind) {
  if (kind === 'equalizer') return 'equalizer';
  return kind.includes('path') ? 'path' : 'other';
}

export class EventsPanel {
  /** @param {any[]} events the page's list of events (it adds to it; this reads it) */
  constructor(events) {
    this.events = events;
    this.box = h('div', { id: 'events', class: 'scroll' });
    this.filter = /** @type {HTMLSelectElement} */ (h('select', { id: 'event-filter' }, h('option', { value: '' }, 'all kinds')));
    this.shown = '';
    this.filter.addEventListener('change', () => this.render());
  }

  /** A kind seen for the first time becomes a choice of the filter. @param {string} kind */
  offer(kind) {
    if (![...this.filter.options].some((o) => o.value === kind)) this.filter.append(h('option', { value: kind }, kind));
  }

  render() {
    const events = this.events;
    const kind = this.filter.value;
    const shownKey = `${events.length}:${events[events.length - 1]?.id}:${kind}`;
    if (shownKey === this.shown) return; // nothing new: no DOM work
    this.shown = shownKey;
    const shown = [];
    for (let i = events.length - 1; i >= 0 && shown.length < EVENT_ROWS; i--) {
      if (!kind || events[i].kind === kind) shown.push(events[i]);
    }
    const counts = new Map();
    for (const e of events) counts.set(e.kind, (counts.get(e.kind) ?? 0) + 1);
    const summary = [...counts.entries()].map(([k, n]) => `${k}: ${n}`).join(' · ');
    this.box.dataset.count = String(events.length);
    fill(
      this.box,
      h('p', { class: 'hint' }, events.length ? `${events.length} events (${summary}), newest first${shown.length === EVENT_ROWS ? `, the last ${EVENT_ROWS} shown` : ''}` : 'No events yet.'),
      shown.length
        ? table(
            ['Time', 'Kind', 'State', 'Detail'],
            shown.map((e) =>
              h('tr', { dataset: { kind: e.kind } }, h('td', { class: 'nowrap' }, fmt.when(e.at)), h('td', null, h('span', { class: `kind kind-${markKind(e.kind)}` }, e.kind)), h('td', { class: 'nowrap' }, e.from_state || e.to_state ? `${e.from_state ?? '·'} → ${e.to_state ?? '·'}` : ''), h('td', null, e.detail)),
            ),
            { class: 'compact events' },
          )
        : null,
    );
  }
}
