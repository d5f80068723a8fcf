// The transfers: a list (state, progress, rate, ETA), refreshed every 1.5 s, and the
// form that starts one. The form leaves validation to the API: a 422 answer's
// field-level messages (errors = [{loc, msg, type}]) are shown next to their fields.

import { all, api, ApiError, newKey, Unauthorized } from '../api.js';
import { fill, h, panel, table } from '../dom.js';
import * as fmt from '../format.js';

const REFRESH_MS = 1500;
const SHOWN = 200; // transfers in the list: the newest
const VERIFICATIONS = [
  ['storage', 'storage: every extent hashed from the destination\u2019s storage at the end'],
  ['receipt', 'receipt: each extent as it is written and at the end, by the destination\u2019s receipts'],
];
const FIELDS = ['source', 'destination', 'streams_per_pair', 'paths', 'pacing.policy', 'pacing.margin', 'equalizer', 'verify', 'verification'];

/** @param {HTMLElement} main */
export function transfersView(main) {
  /** @type {Map<string, fmt.RateMeter>} */
  const meters = new Map();
  /** @type {Map<string, string>} */
  const setNames = new Map();
  const listBox = h('div', { id: 'transfer-list' }, 'Loading…');
  const status = h('p', { class: 'status' });
  const formBox = h('div');
  fill(main, panel('Transfers', status, listBox), panel('Start a transfer', formBox));
  let stopped = false;
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let timer;

  async function refresh() {
    try {
      // the newest SHOWN, listed oldest first as before
      const transfers = (await api(`/transfers?order=desc&limit=${SHOWN}`)).reverse();
      if (stopped) return;
      fill(listBox, renderList(transfers, meters, setNames));
      status.textContent = '';
    } catch (e) {
      if (e instanceof Unauthorized || stopped) return;
      status.textContent = `Could not load the transfers: ${e}`;
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
  }

  async function loadForm() {
    try {
      const [sets, links, agents] = await Promise.all([all('/volume-sets'), all('/links'), all('/agents')]);
      if (stopped) return;
      for (const s of sets) setNames.set(s.id, s.name);
      fill(formBox, transferForm(sets, links, agents, () => {
        clearTimeout(timer);
        refresh();
      }));
    } catch (e) {
      if (!(e instanceof Unauthorized)) fill(formBox, h('p', { class: 'error' }, `Could not load volume sets and links: ${e}`));
    }
  }

  loadForm().then(refresh);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/**
 * @param {any[]} transfers
 * @param {Map<string, fmt.RateMeter>} meters
 * @param {Map<string, string>} setNames
 */
function renderList(transfers, meters, setNames) {
  if (!transfers.length) return h('p', { class: 'empty' }, 'No transfers yet: start one below.');
  const newest = [...transfers].sort((a, b) => b.created_at.localeCompare(a.created_at));
  const rows = newest.map((t) => {
    let meter = meters.get(t.id);
    if (!meter) meters.set(t.id, (meter = new fmt.RateMeter()));
    // the rate between two refreshes; until there are two, the coordinator's (since the
    // transfer last began running)
    const bps = t.state === 'running' ? meter.update(t.done_bytes) ?? t.rate_bps : null;
    const eta = t.state === 'running' ? meter.eta(t.done_bytes, t.total_bytes) ?? t.eta_seconds : null;
    return h(
      'tr',
      { dataset: { transferId: t.id, state: t.state, done: t.done_bytes, total: t.total_bytes } },
      h('td', null, h('a', { href: `#/transfers/${encodeURIComponent(t.id)}`, class: 'mono' }, fmt.shortId(t.id))),
      h('td', null, `${setNames.get(t.source) ?? fmt.shortId(t.source)} → ${setNames.get(t.destination) ?? fmt.shortId(t.destination)}`),
      h('td', null, stateBadge(t.state), t.last_error ? h('div', { class: 'error small' }, t.last_error) : null),
      h('td', { class: 'progress-cell' }, progressBar(t.done_bytes, t.total_bytes)),
      h('td', { class: 'num', dataset: { rate: bps ?? '' } }, t.state === 'running' ? fmt.rate(bps) : '–'),
      h('td', { class: 'num' }, t.state === 'running' ? fmt.duration(eta) : '–'),
      h('td', { class: 'num' }, `${t.legs.length} × ${t.streams_per_pair}`),
      h('td', null, fmt.when(t.created_at)),
    );
  });
  return table(['Transfer', 'Volume sets', 'State', 'Progress', 'Rate', 'ETA', 'Legs × streams', 'Created'], rows, {
    class: 'transfers',
  });
}

/** The states a transfer does not leave. */
export const FINAL = new Set(['completed', 'cancelled']);

/** @param {string} state */
export function stateBadge(state) {
  return h('span', { class: `badge state-${state}`, dataset: { state } }, state);
}

/** @param {number} done @param {number} total */
export function progressBar(done, total) {
  const pct = fmt.percent(done, total);
  return h(
    'div',
    { class: 'progress', role: 'progressbar', 'aria-valuenow': pct.toFixed(1), 'aria-valuemin': '0', 'aria-valuemax': '100' },
    h('div', { class: 'bar', style: `width: ${pct.toFixed(2)}%` }),
    h('span', { class: 'label' }, `${pct.toFixed(1)}% · ${fmt.bytes(done)} of ${fmt.bytes(total)}`),
  );
}

/**
 * The form to start a transfer.
 * @param {any[]} sets @param {any[]} links @param {any[]} agents @param {() => void} created
 */
function transferForm(sets, links, agents, created) {
  const agentNames = new Map(agents.map((a) => [a.id, a.name]));
  const setOptions = [h('option', { value: '' }, '— choose —'), ...sets.map((s) => h('option', { value: s.id }, `${s.name} (${s.members.length} × ${fmt.bytes(s.capacity_bytes / s.members.length)})`))];
  const errors = new Map(FIELDS.concat('_form').map((f) => [f, h('p', { class: 'field-error', dataset: { errorFor: f }, role: 'alert' })]));
  /** @param {string} name @param {string} label @param {HTMLElement} input @param {string} [hint] */
  const field = (name, label, input, hint) =>
    h('div', { class: 'field', dataset: { field: name } }, h('label', { for: `f-${name}` }, label), input, hint ? h('small', null, hint) : null, errors.get(name));
  const paths = links.length
    ? links.map((l) =>
        h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'paths', value: l.id }), ` ${l.name} (${agentNames.get(l.agent_a) ?? '?'}:${l.nic_a} ↔ ${agentNames.get(l.agent_b) ?? '?'}:${l.nic_b}, ${fmt.rate(l.capacity_bps)}, ${l.rtt_ms} ms)`),
      )
    : [h('span', { class: 'empty' }, 'no links registered')];
  const result = h('p', { class: 'result', id: 'form-result' });
  const form = h(
    'form',
    { id: 'new-transfer', class: 'grid-form', novalidate: true },
    field('source', 'Source volume set', h('select', { id: 'f-source', name: 'source' }, setOptions)),
    field('destination', 'Destination volume set', h('select', { id: 'f-destination', name: 'destination' }, setOptions.map((o) => o.cloneNode(true)))),
    field('streams_per_pair', 'Streams per server pair', h('input', { id: 'f-streams_per_pair', name: 'streams_per_pair', type: 'number', value: '8', step: '1' }), '1 to 256'),
    h('fieldset', { class: 'field', dataset: { field: 'paths' } }, h('legend', null, 'Paths (links)'), paths, h('small', null, 'none: each leg goes over its agents\u2019 addresses'), errors.get('paths')),
    field('pacing.policy', 'Pacing', h('select', { id: 'f-pacing.policy', name: 'pacing.policy' }, ['per-nic', 'per-socket', 'off'].map((p) => h('option', { value: p }, p)))),
    field('pacing.margin', 'Pacing margin', h('input', { id: 'f-pacing.margin', name: 'pacing.margin', type: 'number', value: '0.05', step: '0.01' }), 'fraction of the share left unused, 0 to < 1'),
    field('equalizer', 'Equalizer', h('input', { id: 'f-equalizer', name: 'equalizer', type: 'checkbox', checked: true })),
    field('verify', 'Verify', h('input', { id: 'f-verify', name: 'verify', type: 'checkbox', checked: true })),
    field('verification', 'Verification', h('select', { id: 'f-verification', name: 'verification' }, VERIFICATIONS.map(([v, text]) => h('option', { value: v }, text))), 'storage hashes the whole destination from storage at the end; receipt checks each extent by what the destination received, as it is written and again at the end, and reads nothing back'),
    h('div', { class: 'actions' }, h('button', { type: 'submit', id: 'start-transfer' }, 'Start transfer'), errors.get('_form'), result),
  );
  // One key per transfer asked for: a second click, or a resend, gets the same transfer back.
  let key = newKey();
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    for (const el of errors.values()) el.textContent = '';
    form.querySelectorAll('.invalid').forEach((el) => el.classList.remove('invalid'));
    result.textContent = 'Sending…';
    try {
      const body = formBody(/** @type {HTMLFormElement} */ (form));
      const t = await api('/transfers', { method: 'POST', body, more: { 'Idempotency-Key': key } });
      key = newKey(); // the next submission asks for another transfer
      result.replaceChildren('Transfer ', h('a', { href: `#/transfers/${encodeURIComponent(t.id)}`, class: 'mono', dataset: { created: t.id } }, fmt.shortId(t.id)), ` ${t.state}.`);
      created();
    } catch (e) {
      if (e instanceof Unauthorized) return;
      result.textContent = '';
      showErrors(e, errors, form);
    }
  });
  return form;
}

/** The body of POST /transfers from the form, numbers as numbers when they parse. @param {HTMLFormElement} form */
function formBody(form) {
  const value = (/** @type {string} */ name) => /** @type {HTMLInputElement} */ (form.elements.namedItem(name)).value;
  const checked = (/** @type {string} */ name) => /** @type {HTMLInputElement} */ (form.elements.namedItem(name)).checked;
  const number = (/** @type {string} */ name) => {
    const raw = value(name).trim();
    return raw === '' ? undefined : Number.isFinite(Number(raw)) ? Number(raw) : raw;
  };
  const paths = [...form.querySelectorAll('input[name="paths"]:checked')].map((el) => /** @type {HTMLInputElement} */ (el).value);
  return {
    source: value('source'),
    destination: value('destination'),
    streams_per_pair: number('streams_per_pair'),
    paths,
    pacing: { policy: value('pacing.policy'), margin: number('pacing.margin') },
    equalizer: checked('equalizer'),
    verify: checked('verify'),
    verification: value('verification'),
  };
}

/**
 * Puts each message of a 422 next to its field (by `loc`: ["body", "pacing", "margin"]
 * goes to "pacing.margin", ["body", "paths", 0] to "paths"); the rest to the form.
 * @param {unknown} e @param {Map<string, HTMLElement>} errors @param {HTMLElement} form
 */
function showErrors(e, errors, form) {
  const formError = /** @type {HTMLElement} */ (errors.get('_form'));
  if (!(e instanceof ApiError)) {
    formError.textContent = `The coordinator did not answer: ${e}`;
    return;
  }
  if (e.status !== 422 || !e.errors) {
    formError.textContent = `Refused (${e.status}): ${typeof e.detail === 'string' ? e.detail : JSON.stringify(e.detail)}`;
    return;
  }
  for (const item of e.errors) {
    const names = (Array.isArray(item.loc) ? item.loc : []).filter((/** @type {unknown} */ x) => typeof x === 'string' && x !== 'body');
    let key = '_form';
    for (let n = names.length; n > 0; n--) {
      const candidate = names.slice(0, n).join('.');
      if (errors.has(candidate)) {
        key = candidate;
        break;
      }
    }
    const el = /** @type {HTMLElement} */ (errors.get(key));
    const msg = String(item.msg ?? 'invalid').replace(/^Value error, /, '');
    el.textContent = el.textContent ? `${el.textContent}; ${msg}` : msg;
    form.querySelector(`[data-field="${key}"]`)?.classList.add('invalid');
  }
}
