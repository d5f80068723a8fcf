// Campaign runs (issues 5 and 6): the list (state, progress in runs, ETA), the form
// that starts a run of a shipped campaign, and a run's page: its progress while it
// runs, the summary table (the design's section 6 ratios, targets met or missed) and
// the HTML report.
//
// Data: GET /campaigns (every 2 s), /campaigns/available (the form), /campaigns/{id}
// (every second while the run is going), /campaigns/{id}/report (when its results
// change: after every finished run). The report is fetched with the token and shown
// in a sandboxed iframe through srcdoc (an iframe cannot send the header). A
// coordinator without the campaigns API answers 404: the page says so.

import { API, api, ApiError, text, Unauthorized } from '../api.js';
import { fill, h, panel, table } from '../dom.js';
import * as fmt from '../format.js';
import { stateBadge } from './transfers.js';

const LIST_MS = 2000;
const RUN_MS = 1000;
const ACTIVE = new Set(['running', 'cancelling']);
const OTHER_FILE = '__file';
const FIELDS = ['campaign', 'quick'];

/** (key, header, format) of the summary's figures, as the report's table has them. */
const COLUMNS = /** @type {[string, string, (v: number) => string][]} */ ([
  ['goodput_bps', 'Goodput', (v) => fmt.rate(v)],
  ['of_bottleneck', '/ bottleneck', (v) => v.toFixed(3)],
  ['of_iperf3', '/ iperf3', (v) => v.toFixed(3)],
  ['jain', 'Jain', (v) => v.toFixed(3)],
  ['failover_lost_s', 'Failover lost', (v) => `${v.toFixed(2)} s`],
  ['back_after_s', 'Path back', (v) => `${v.toFixed(2)} s`],
  ['cpu_s_per_gb', 'CPU s/GB', (v) => v.toFixed(2)],
  ['idle', 'Streams idle', (v) => `${Math.round(v * 100)}%`],
  ['rwnd_limited', 'Rwnd-limited', (v) => `${Math.round(v * 100)}%`],
  ['sndbuf_limited', 'Sndbuf-limited', (v) => `${Math.round(v * 100)}%`],
]);

// ---------------------------------------------------------------- the list

/** @param {HTMLElement} main */
export function campaignsView(main) {
  const box = h('div', { id: 'campaigns' }, 'Loading…');
  const status = h('p', { class: 'status' });
  const formBox = h('div', { id: 'campaign-form-box' });
  fill(main, panel('Campaign runs', status, box), panel('Start a campaign run', formBox));
  let stopped = false;
  /** @type {ReturnType<typeof setTimeout> | undefined} */ let timer;

  async function refresh() {
    try {
      const runs = await api('/campaigns');
      if (stopped) return;
      box.dataset.available = 'true';
      fill(box, renderList(runs));
      status.textContent = '';
    } catch (e) {
      if (stopped || e instanceof Unauthorized) return;
      if (e instanceof ApiError && e.status === 404) {
        box.dataset.available = 'false';
        fill(box, h('p', { class: 'notice', id: 'no-campaigns' }, 'No campaigns API on this coordinator yet (GET /api/v1/campaigns answers 404).'));
        fill(formBox);
        return;
      }
      status.textContent = `Could not load the campaign runs: ${e}`;
    }
    if (!stopped) timer = setTimeout(refresh, LIST_MS);
  }

  async function loadForm() {
    try {
      const available = await api('/campaigns/available');
      if (stopped) return;
      fill(formBox, campaignForm(available, () => {
        clearTimeout(timer);
        refresh();
      }));
    } catch (e) {
      if (e instanceof Unauthorized || stopped) return;
      if (!(e instanceof ApiError && e.status === 404)) fill(formBox, h('p', { class: 'error' }, `Could not load the shipped campaigns: ${e}`));
    }
  }

  refresh();
  loadForm();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** @param {any[]} runs newest first */
function renderList(runs) {
  if (!runs.length) return h('p', { class: 'empty' }, 'No campaign runs yet: start one below, or import one with `reservoir campaign upload`.');
  const rows = runs.map((r) =>
    h(
      'tr',
      { dataset: { runId: r.id, state: r.state, done: r.progress.done, total: r.progress.total } },
      h('td', null, h('a', { href: `#/campaigns/${encodeURIComponent(r.id)}`, class: 'mono' }, fmt.shortId(r.id))),
      h('td', null, r.campaign, r.origin === 'import' ? h('span', { class: 'small' }, ' (imported)') : null),
      h('td', null, r.quick ? 'quick' : 'full'),
      h('td', null, stateBadge(r.state), r.error ? h('div', { class: 'error small' }, firstLine(r.error)) : null),
      h('td', { class: 'progress-cell' }, runProgress(r)),
      h('td', null, fmt.when(r.started_at)),
      h('td', { class: 'num' }, fmt.duration(duration(r))),
    ),
  );
  return table(['Run', 'Campaign', 'Subset', 'State', 'Progress', 'Started', 'Duration'], rows, { class: 'campaign-runs' });
}

/** Runs done of the total, with the ETA while it runs. @param {any} r */
function runProgress(r) {
  const { done, total, eta_s: eta } = r.progress;
  const pct = fmt.percent(done, total);
  const tail = ACTIVE.has(r.state) && eta !== null ? ` · ETA ${fmt.duration(eta)}` : '';
  return h(
    'div',
    { class: 'progress', role: 'progressbar', 'aria-valuenow': pct.toFixed(1), 'aria-valuemin': '0', 'aria-valuemax': '100' },
    h('div', { class: 'bar', style: `width: ${pct.toFixed(2)}%` }),
    h('span', { class: 'label' }, `${done} of ${total} runs${tail}`),
  );
}

/** Seconds from start to end (or to now while it runs). @param {any} r */
function duration(r) {
  if (!r.started_at) return null;
  const end = r.finished_at ? Date.parse(r.finished_at) : ACTIVE.has(r.state) ? Date.now() : null;
  return end === null ? null : (end - Date.parse(r.started_at)) / 1000;
}

/** @param {string} s */
function firstLine(s) {
  return s.split('\n')[0];
}

// ---------------------------------------------------------------- the form

/**
 * The form that starts a run: a shipped campaign (or another file of config/campaigns)
 * and the quick subset. Validation is the API's: a 422's messages go under the field.
 * @param {any[]} available @param {() => void} created
 */
function campaignForm(available, created) {
  const errors = new Map(FIELDS.concat('_form').map((f) => [f, h('p', { class: 'field-error', dataset: { errorFor: f }, role: 'alert' })]));
  const byName = new Map(available.map((c) => [c.name, c]));
  const options = available.map((c) =>
    h('option', { value: c.name, disabled: c.error ? true : undefined }, c.error ? `${c.name} (does not load)` : `${c.name} — ${c.scenarios} scenarios × ${c.repetitions}, about ${fmt.duration(c.estimate_s)}`),
  );
  const select = /** @type {HTMLSelectElement} */ (h('select', { id: 'f-campaign', name: 'campaign' }, options, h('option', { value: OTHER_FILE }, 'Another file under config/campaigns…')));
  const file = /** @type {HTMLInputElement} */ (h('input', { id: 'f-campaign-file', name: 'campaign-file', type: 'text', placeholder: 'config/campaigns/NAME.toml', hidden: true }));
  const quick = /** @type {HTMLInputElement} */ (h('input', { id: 'f-quick', name: 'quick', type: 'checkbox' }));
  const about = h('small', { id: 'campaign-about' });
  const result = h('p', { class: 'result', id: 'campaign-form-result' });
  const describe = () => {
    const other = select.value === OTHER_FILE;
    file.hidden = !other;
    const c = byName.get(select.value);
    if (!c) {
      about.textContent = other ? 'A campaign file of the coordinator’s repository.' : '';
      return;
    }
    const q = quick.checked;
    const runs = q ? `${c.quick_scenarios} scenarios × ${c.quick_repetitions}` : `${c.scenarios} scenarios × ${c.repetitions}`;
    const estimate = q ? c.quick_estimate_s : c.estimate_s;
    about.textContent = `${c.description} · ${runs} · about ${fmt.duration(estimate)}`;
  };
  select.addEventListener('change', describe);
  quick.addEventListener('change', describe);
  /** @param {string} name @param {string} label @param {HTMLElement[]} inputs */
  const field = (name, label, ...inputs) =>
    h('div', { class: 'field', dataset: { field: name } }, h('label', { for: `f-${name}` }, label), inputs, errors.get(name));
  const form = h(
    'form',
    { id: 'new-campaign', class: 'grid-form', novalidate: true },
    field('campaign', 'Campaign', select, file, about),
    field('quick', 'Quick subset only', quick),
    h('div', { class: 'actions' }, h('button', { type: 'submit', id: 'start-campaign' }, 'Start campaign run'), errors.get('_form'), result),
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    for (const el of errors.values()) el.textContent = '';
    form.querySelectorAll('.invalid').forEach((el) => el.classList.remove('invalid'));
    result.textContent = 'Sending…';
    const campaign = select.value === OTHER_FILE ? file.value.trim() : select.value;
    try {
      const run = await api('/campaigns', { method: 'POST', body: { campaign, quick: quick.checked } });
      result.replaceChildren('Campaign run ', h('a', { href: `#/campaigns/${encodeURIComponent(run.id)}`, class: 'mono', dataset: { created: run.id } }, fmt.shortId(run.id)), ` ${run.state}.`);
      created();
    } catch (e) {
      if (e instanceof Unauthorized) return;
      result.textContent = '';
      showErrors(e, errors, form);
    }
  });
  describe();
  return form;
}

/**
 * The messages of a 422 under their fields (loc ["body", "campaign"]), others (a 409:
 * a run is going on) under the form.
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
    const name = (Array.isArray(item.loc) ? item.loc : []).find((/** @type {unknown} */ x) => typeof x === 'string' && x !== 'body');
    const key = errors.has(name) ? name : '_form';
    const el = /** @type {HTMLElement} */ (errors.get(key));
    const line = h('span', { class: 'line' }, String(item.msg ?? 'invalid').replace(/^Value error, /, ''));
    if (el.childNodes.length) el.append(h('br'));
    el.append(line);
    form.querySelector(`[data-field="${key}"]`)?.classList.add('invalid');
  }
}

// ---------------------------------------------------------------- one run

/** @param {HTMLElement} main @param {string} id */
export function campaignView(main, id) {
  const title = h('h1', null, `Campaign run ${fmt.shortId(id)}`);
  const headline = h('div', { class: 'headline' });
  const progressBox = h('div', { id: 'campaign-progress' });
  const now = h('p', { class: 'settings', id: 'campaign-now' });
  const facts = h('p', { class: 'settings', id: 'campaign-facts' });
  const actions = h('div', { class: 'actions' });
  const actionError = h('p', { class: 'error', id: 'campaign-action-error' });
  const errorBox = h('div', { id: 'campaign-error' });
  const summaryBox = h('div', { id: 'campaign-summary', class: 'scroll-x' }, 'Loading…');
  const reportBox = h('div', { id: 'campaign-report' }, h('p', { class: 'empty' }, 'No results yet.'));
  fill(
    main,
    h('section', { class: 'panel head' }, h('a', { href: '#/campaigns', class: 'back' }, '← Campaign runs'), title, headline, progressBox, now, facts, actions, actionError, errorBox),
    panel('Summary', h('p', { class: 'hint' }, 'One row per scenario: medians over its repetitions. Green: a design target met, red: missed (hover for the target). Ratios of reservoir scenarios to the bottleneck and to the iperf3 baseline of the same streams.'), summaryBox),
    panel('Report', reportBox),
  );
  let stopped = false;
  /** @type {ReturnType<typeof setTimeout> | undefined} */ let timer;
  let reportFor = '';

  async function refresh() {
    /** @type {any} */ let run;
    try {
      run = await api(`/campaigns/${encodeURIComponent(id)}`);
    } catch (e) {
      if (stopped || e instanceof Unauthorized) return;
      if (e instanceof ApiError && e.status === 404) {
        fill(summaryBox, h('p', { class: 'error', id: 'campaign-missing' }, `No campaign run ${id} on this coordinator.`));
        return;
      }
      actionError.textContent = `Could not load the run: ${e}`;
      timer = setTimeout(refresh, RUN_MS * 3);
      return;
    }
    if (stopped) return;
    actionError.textContent = '';
    renderHead(run);
    fill(summaryBox, summaryTable(run));
    const stamp = `${run.results_at}|${run.state}`;
    if (run.has_results && stamp !== reportFor) {
      reportFor = stamp;
      loadReport();
    }
    if (ACTIVE.has(run.state)) timer = setTimeout(refresh, RUN_MS);
  }

  /** @param {any} run */
  function renderHead(run) {
    title.textContent = `Campaign ${run.campaign}`;
    fill(headline, stateBadge(run.state), h('span', { class: 'mono small' }, `run ${run.id}`), run.run_id ? h('span', { class: 'small' }, `results ${run.run_id}`) : null);
    fill(progressBox, runProgress(run));
    progressBox.dataset.done = String(run.progress.done);
    progressBox.dataset.total = String(run.progress.total);
    progressBox.dataset.state = run.state;
    const p = run.progress;
    now.textContent = ACTIVE.has(run.state) && p.scenario ? `Now: ${p.scenario} (repetition ${p.repetition ?? '–'}) · elapsed ${fmt.duration(p.elapsed_s)} · ETA ${fmt.duration(p.eta_s)}` : '';
    const exit = run.exit_code === null ? '' : ` · runner exit status ${run.exit_code}`;
    facts.textContent = `${run.quick ? 'Quick subset' : 'Full matrix'} · ${run.origin === 'import' ? 'imported' : 'started here'} · started ${fmt.when(run.started_at)} · ${run.finished_at ? `ended ${fmt.when(run.finished_at)}` : 'not ended'} · duration ${fmt.duration(duration(run))}${exit}`;
    fill(errorBox, run.error ? h('pre', { class: 'report error' }, run.error) : null);
    fill(actions, run.state === 'running' ? h('button', { type: 'button', id: 'cancel-campaign', onclick: () => cancel() }, 'Cancel run') : null);
  }

  async function cancel() {
    actionError.textContent = '';
    try {
      await api(`/campaigns/${encodeURIComponent(id)}/cancel`, { method: 'POST' });
      clearTimeout(timer);
      refresh();
    } catch (e) {
      if (!(e instanceof Unauthorized)) actionError.textContent = `Cancel refused: ${e}`;
    }
  }

  async function loadReport() {
    try {
      const html = await text(`${API}/campaigns/${encodeURIComponent(id)}/report`);
      if (stopped) return;
      fill(reportBox, reportFrame(html), h('p', { class: 'hint' }, h('button', { type: 'button', id: 'download-results', onclick: () => download() }, 'Download results.json')));
    } catch (e) {
      if (!stopped && !(e instanceof Unauthorized)) fill(reportBox, h('p', { class: 'error' }, `Could not load the report: ${e}`));
    }
  }

  async function download() {
    try {
      const data = await api(`/campaigns/${encodeURIComponent(id)}/results`);
      const url = URL.createObjectURL(new Blob([JSON.stringify(data, null, 1)], { type: 'application/json' }));
      const a = h('a', { href: url, download: `campaign-${id}-results.json` });
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      if (!(e instanceof Unauthorized)) actionError.textContent = `Could not download the results: ${e}`;
    }
  }

  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** The report in a sandboxed iframe (no scripts), as tall as its page. @param {string} html */
function reportFrame(html) {
  const frame = /** @type {HTMLIFrameElement} */ (h('iframe', { class: 'report-frame', title: 'Campaign report', sandbox: 'allow-same-origin' }));
  frame.addEventListener('load', () => {
    const doc = frame.contentDocument;
    if (doc?.documentElement) frame.style.height = `${doc.documentElement.scrollHeight + 24}px`;
    frame.dataset.loaded = 'true';
  });
  frame.srcdoc = html;
  return frame;
}

/** The summary rows with each figure against its target. @param {any} run */
function summaryTable(run) {
  if (!run.summary.length) return h('p', { class: 'empty' }, run.has_results ? 'The results hold no runs yet.' : 'No results yet: the summary appears after the first finished run.');
  const rows = run.summary.map((/** @type {any} */ row) =>
    h(
      'tr',
      { dataset: { scenario: row.scenario, tool: row.tool } },
      h('td', { class: 'mono' }, row.scenario, row.baseline ? h('div', { class: 'small' }, `baseline ${row.baseline}`) : null),
      h('td', null, row.tool),
      h('td', { class: 'num' }, String(row.streams)),
      h('td', { class: 'num' }, `${row.repetitions}${row.errors ? ` (${row.errors} failed)` : ''}`),
      COLUMNS.map(([key, , format]) => {
        const value = row[key];
        const check = row.checks[key];
        return h(
          'td',
          { class: `num${check ? (check.met ? ' met' : ' missed') : ''}`, dataset: { column: key }, title: check ? `target ${check.target}: ${check.met ? 'met' : 'missed'}` : undefined },
          value === null || value === undefined ? '–' : format(value),
        );
      }),
    ),
  );
  const facts = [
    `${run.runs_recorded} run${run.runs_recorded === 1 ? '' : 's'} recorded${run.runs_failed ? `, ${run.runs_failed} failed` : ''}`,
    run.topology ? `topology ${run.topology}` : null,
    run.bottleneck_bps ? `bottleneck ${fmt.rate(run.bottleneck_bps)}` : null,
  ].filter(Boolean);
  return [
    h('p', { class: 'hint' }, facts.join(' · ')),
    table(['Scenario', 'Tool', 'Streams', 'Repetitions', ...COLUMNS.map(([, head]) => head)], rows, { class: 'summary compact' }),
  ];
}
