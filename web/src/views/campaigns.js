// Campaign runs and their reports, from GET /api/v1/campaigns. A coordinator without
// that API answers 404: the page says so and shows nothing else (no made-up runs).

import { api, ApiError, Unauthorized } from '../api.js';
import { fill, h, panel, table } from '../dom.js';

/** @param {HTMLElement} main */
export function campaignsView(main) {
  const box = h('div', { id: 'campaigns' }, 'Loading…');
  fill(main, panel('Campaigns', box));
  let stopped = false;
  api('/campaigns')
    .then((data) => {
      if (!stopped) fill(box, render(data));
    })
    .catch((e) => {
      if (stopped || e instanceof Unauthorized) return;
      if (e instanceof ApiError && e.status === 404) {
        box.dataset.available = 'false';
        fill(box, h('p', { class: 'notice', id: 'no-campaigns' }, 'No campaigns API on this coordinator yet (GET /api/v1/campaigns answers 404).'));
      } else {
        fill(box, h('p', { class: 'error' }, `Could not load the campaigns: ${e}`));
      }
    });
  return () => {
    stopped = true;
  };
}

/** Runs as the API gives them: a list of objects, each perhaps with a report. @param {any} data */
function render(data) {
  const runs = Array.isArray(data) ? data : Array.isArray(data?.items) ? data.items : null;
  if (!runs) return h('pre', null, JSON.stringify(data, null, 2));
  if (!runs.length) return h('p', { class: 'empty' }, 'No campaign runs yet.');
  return runs.map((run) => {
    const { report, ...fields } = run;
    const rows = Object.entries(fields).map(([k, v]) => h('tr', null, h('th', null, k), h('td', null, typeof v === 'object' ? JSON.stringify(v) : String(v))));
    return h(
      'article',
      { class: 'campaign' },
      h('h3', null, String(run.name ?? run.id ?? 'campaign run')),
      table(['Field', 'Value'], rows, { class: 'compact' }),
      report === undefined ? null : reportView(report),
    );
  });
}

/** A report: a table of rows if it is a list of flat objects, else its JSON. @param {any} report */
function reportView(report) {
  const rows = Array.isArray(report) ? report : Array.isArray(report?.rows) ? report.rows : null;
  if (rows && rows.length && rows.every((r) => r && typeof r === 'object' && !Array.isArray(r))) {
    const heads = [...new Set(rows.flatMap((r) => Object.keys(r)))];
    return table(heads, rows.map((r) => h('tr', null, heads.map((k) => h('td', null, r[k] === undefined ? '' : typeof r[k] === 'object' ? JSON.stringify(r[k]) : String(r[k]))))), { class: 'compact' });
  }
  if (typeof report === 'string') return h('pre', { class: 'report' }, report);
  return h('pre', { class: 'report' }, JSON.stringify(report, null, 2));
}
