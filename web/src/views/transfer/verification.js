// The transfer page's Verification panel: each leg's result once its copy ends (what
// was verified, how, the copy's own summary), and whether every leg is verified.

import { fill, h, table } from '../../dom.js';
import * as fmt from '../../format.js';
import { stateBadge } from '../transfers.js';

/**
 * Fills `box` with the verification of transfer `t`'s legs.
 * @param {HTMLElement} box @param {any} t @param {(agentId: string) => string} name
 */
export function renderVerification(box, t, name) {
  const legs = t.legs ?? [];
  const done = legs.filter((/** @type {any} */ l) => l.summary);
  if (!t.verify && !done.length) {
    fill(box, h('p', { class: 'hint' }, 'Verification was not requested for this transfer.'));
    return;
  }
  if (!done.length) {
    fill(box, h('p', { class: 'hint', dataset: { verified: 'pending' } }, t.state === 'completed' ? 'Completed; the legs carry no summary.' : 'The result shows here once the legs are completed.'));
    return;
  }
  const rows = legs.map((/** @type {any} */ l) => {
    const s = l.summary ?? {};
    const verified = s.verified === true ? 'verified' : s.verified === false ? 'NOT verified' : l.summary ? 'not checked' : 'pending';
    const elapsed = Number(s.elapsed) || 0;
    const copied = Number(s.copied_bytes ?? l.bytes) || 0;
    const watch = fmt.sourceWatch(s);
    const lapses = fmt.holdLapses(s);
    return h(
      'tr',
      { dataset: { leg: l.index, verified: String(s.verified ?? '') } },
      h('td', null, l.index),
      h('td', null, `${name(l.source_agent)}:${l.source_volume} → ${name(l.dest_agent)}:${l.dest_volume}`),
      h('td', null, stateBadge(l.state)),
      h(
        'td',
        null,
        h('span', { class: `badge verify-${s.verified === true ? 'ok' : s.verified === false ? 'bad' : 'none'}` }, verified),
        s.verification ? h('div', { class: 'hint', dataset: { verification: s.verified_by ?? '' } }, s.verification) : s.verified_by ? ` (${s.verified_by})` : '',
        watch ? h('div', { class: 'hint', dataset: { sourceWatched: s.source_watched ?? '' } }, watch) : '',
        lapses ? h('div', { class: 'hint error', dataset: { holdLapses: String(s.hold_lapses.length) } }, lapses) : '',
      ),
      h('td', { class: 'num' }, fmt.bytes(copied)),
      h('td', { class: 'num' }, elapsed ? fmt.duration(elapsed) : '–'),
      h('td', { class: 'num' }, elapsed ? fmt.rate((copied * 8) / elapsed) : '–'),
      h('td', null, h('details', null, h('summary', null, 'summary'), h('pre', null, JSON.stringify(l.summary ?? null, null, 2)))),
    );
  });
  const all = legs.length > 0 && legs.every((/** @type {any} */ l) => l.summary?.verified === true);
  fill(
    box,
    h('p', { class: all ? 'ok' : 'hint', dataset: { verified: all ? 'all' : 'partial' } }, all ? `All ${legs.length} legs verified.` : `${done.length} of ${legs.length} legs have a result.`),
    table(['Leg', 'Agents and volumes', 'State', 'Verification', 'Copied', 'Time', 'Rate', ''], rows, { class: 'compact' }),
  );
}
