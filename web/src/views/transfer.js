// One transfer: progress, the live per-stream charts (throughput, cwnd, RTT, caps),
// the aggregate against the bottleneck, per-path state, the events log and, once the
// legs are completed, their verification.
//
// Data: GET /transfers/{id} (legs, every 3 s until final), /links and /agents (names,
// capacities), /transfers/{id}/streams (the history at opening), the live feed
// /transfers/{id}/live (server-sent events: transfer, event, samples); the panels of
// transfer/ fetch their own (pacing.js) or render what the page gives them (events.js,
// verification.js). Samples go into
// ring buffers (telemetry.js: the last 10 minutes); charts redraw at most once per
// animation frame, and tables at most once a second.

import { api, ApiError, readEvents, Unauthorized } from '../api.js';
import { Heatmap, streamColor, TimeChart } from '../charts.js';
import { fill, h, panel, table } from '../dom.js';
import * as fmt from '../format.js';
import { Frame, TelemetryStore } from '../telemetry.js';
import { FINAL, progressBar, stateBadge } from './transfers.js';
import { EventsPanel, markKind } from './transfer/events.js';
import { PacingPanel } from './transfer/pacing.js';
import { renderVerification } from './transfer/verification.js';

const WINDOW_SECONDS = 600;
const MAX_EVENTS = 5000;
const RECONNECT_MS = 2000;
const HISTORY_PAGE = 10000; // the API's largest limit
const HISTORY_PAGES = 12; // 120000 samples: the whole window at 64 streams and 2 Hz

/** Axis labels of rates: "750M", "1G" (the panel says bit/s). @param {number} v */
const rateAxis = (v) => fmt.rateShort(v);

/** @param {HTMLElement} main @param {string} id */
export function transferView(main, id) {
  const store = new TelemetryStore({ windowSeconds: WINDOW_SECONDS });
  const frames = { bps: new Frame(), cwnd: new Frame(), rtt: new Frame(), cap: new Frame() };
  const meter = new fmt.RateMeter();
  /** @type {any} */ let transfer = null;
  /** @type {Map<string, any>} */ let links = new Map();
  /** @type {Map<string, any>} */ let agents = new Map();
  /** @type {any[]} */ const events = [];
  const eventIds = new Set();
  /** @type {{t: number, kind: string}[]} */ let marks = [];
  let stopped = false;
  const abort = new AbortController();
  /** @type {ReturnType<typeof setTimeout> | undefined} */ let pollTimer;

  // ---------------------------------------------------------------- layout
  const title = h('h1', null, `Transfer ${fmt.shortId(id)}`);
  const headline = h('div', { class: 'headline' });
  const progressBox = h('div', { id: 'progress' });
  const actions = h('div', { class: 'actions' });
  const actionError = h('p', { class: 'error' });
  const settings = h('p', { class: 'settings' });
  const liveState = h('span', { class: 'live-state', id: 'live-state' }, 'connecting…');
  const streamsBox = h('div', { id: 'chart-streams', class: 'chart', dataset: { points: '0', streams: '0', length: '0' } });
  const heatBox = h('div', { id: 'heatmap', class: 'chart' });
  const aggregateBox = h('div', { id: 'chart-aggregate', class: 'chart' });
  const cwndBox = h('div', { id: 'chart-cwnd', class: 'chart' });
  const rttBox = h('div', { id: 'chart-rtt', class: 'chart' });
  const capBox = h('div', { id: 'chart-cap', class: 'chart' });
  const streamTable = h('div', { id: 'stream-table', class: 'scroll' });
  const pathsBox = h('div', { id: 'paths' });
  const eventsPanel = new EventsPanel(events);
  const verifyBox = h('div', { id: 'verification' });
  const pacingPanel = new PacingPanel(id, () => transfer, abort.signal);
  const legend = h(
    'p',
    { class: 'hint' },
    'One line per stream. Hover: the nearest stream is highlighted and named. Ticks: ',
    h('span', { class: 'swatch equalizer' }),
    ' equalizer cap changes, ',
    h('span', { class: 'swatch path' }),
    ' path events, ',
    h('span', { class: 'swatch other' }),
    ' other events.',
  );
  fill(
    main,
    h('section', { class: 'panel head' }, h('a', { href: '#/transfers', class: 'back' }, '← Transfers'), title, headline, progressBox, settings, actions, actionError),
    panel('Throughput per stream (bit/s)', legend, liveState, streamsBox),
    panel('Throughput per stream: heatmap', h('p', { class: 'hint' }, 'One row per stream, one column per half second: a slow or silent stream stands out at any stream count. Hover for its value.'), heatBox),
    panel('Aggregate and bottleneck (bit/s)', h('p', { class: 'hint' }, 'Sum of the streams\u2019 acknowledged rates; the dashed line is the bottleneck: the sum of the capacities of the transfer\u2019s links.'), aggregateBox),
    h('div', { class: 'two' }, panel('cwnd per stream', cwndBox), panel('RTT per stream', rttBox)),
    panel('cwnd caps set by the equalizer (segments)', h('p', { class: 'hint' }, 'The cap in force per stream (segments), from the samples; each cap change is an equalizer event (orange ticks).'), capBox),
    panel('Streams', streamTable),
    h('div', { class: 'two' }, panel('Paths', pathsBox), panel('Per-NIC pacing', pacingPanel.box, pacingPanel.chartBox)),
    panel('Events', h('label', null, 'Show ', eventsPanel.filter), eventsPanel.box),
    panel('Verification', verifyBox),
  );

  const charts = {
    bps: new TimeChart(streamsBox, { title: 'throughput', unit: fmt.rate, axis: rateAxis, marks: () => marks, height: 280 }),
    aggregate: new TimeChart(aggregateBox, { title: 'aggregate', unit: fmt.rate, axis: rateAxis, marks: () => marks }),
    cwnd: new TimeChart(cwndBox, { title: 'cwnd', unit: fmt.bytes, marks: () => marks }),
    rtt: new TimeChart(rttBox, { title: 'rtt', unit: (v) => `${+v.toFixed(1)} ms`, marks: () => marks }),
    heat: new Heatmap(heatBox, { unit: fmt.rate }),
    cap: new TimeChart(capBox, { title: 'cap', unit: (v) => `${+v.toFixed(0)} seg`, axis: (v) => `${+v.toFixed(0)}`, marks: () => marks }),
  };

  // ---------------------------------------------------------------- drawing
  // New samples mark every chart dirty; each animation frame redraws ONE dirty chart
  // (or, with none dirty, the tables, at most once a second), so no frame carries the
  // cost of all of them: with 64 streams a chart costs a few ms, all of them tens.
  const CHARTS = /** @type {const} */ (['bps', 'heat', 'aggregate', 'cwnd', 'rtt', 'cap']);
  /** @type {Set<typeof CHARTS[number]>} */ const dirty = new Set();
  /** @type {{label: string, stroke: string}[]} */ let series = [];
  let frameRequested = false;
  let drawnVersion = -1;
  let marksChanged = false;
  let tablesAt = 0;
  const frameCost = { mean: 0, max: 0, n: 0 };
  const aggregateX = new Frame();
  /** @type {ReturnType<typeof setTimeout> | undefined} */ let tableTimer;

  function schedule() {
    if (frameRequested || stopped) return;
    frameRequested = true;
    requestAnimationFrame(draw);
  }

  function draw() {
    frameRequested = false;
    if (stopped) return;
    const began = performance.now();
    if (store.version !== drawnVersion || marksChanged) {
      drawnVersion = store.version;
      marksChanged = false;
      series = store.list.map((s, i) => ({ label: s.label, stroke: streamColor(i) }));
      CHARTS.forEach((key) => dirty.add(key));
    }
    const [key] = dirty;
    if (key !== undefined) {
      dirty.delete(key);
      drawChart(key);
      const took = performance.now() - began;
      frameCost.mean = frameCost.n ? 0.9 * frameCost.mean + 0.1 * took : took;
      frameCost.max = Math.max(frameCost.max, took);
      frameCost.n += 1;
      // the work of one frame, for tests and the curious
      streamsBox.dataset.drawMs = frameCost.mean.toFixed(2);
      streamsBox.dataset.drawMaxMs = frameCost.max.toFixed(2);
      schedule(); // the next dirty chart, or the tables
      return;
    }
    const now = performance.now();
    if (now - tablesAt > 1000) {
      tablesAt = now;
      renderStreams();
      renderPaths();
      eventsPanel.render();
    } else if (tableTimer === undefined) {
      tableTimer = setTimeout(() => {
        tableTimer = undefined;
        schedule();
      }, 1000 - (now - tablesAt));
    }
  }

  /** @param {typeof CHARTS[number]} key */
  function drawChart(key) {
    if (key === 'heat') {
      charts.heat.draw(store, 'bps');
    } else if (key === 'aggregate') {
      const x = aggregateX.times(store);
      const limit = bottleneck();
      charts.aggregate.draw(
        [
          { label: 'aggregate', stroke: '#1f5fbf', width: 2 },
          { label: `bottleneck ${fmt.rate(limit)}`, stroke: '#c0392b', width: 1.5, dash: [6, 4] },
        ],
        [x, aggregateX.sum(store, 'bps'), x.map(() => limit || null)],
      );
    } else {
      charts[key].draw(series, frames[key].build(store, key));
    }
    if (key === 'bps') {
      streamsBox.dataset.points = String(store.points);
      streamsBox.dataset.streams = String(store.list.length);
      streamsBox.dataset.length = String(charts.bps.length());
    }
  }

  function bottleneck() {
    if (!transfer) return 0;
    const ids = new Set([...transfer.paths, ...transfer.legs.flatMap((/** @type {any} */ l) => l.paths)]);
    let sum = 0;
    for (const lid of ids) sum += links.get(lid)?.capacity_bps ?? 0;
    return sum;
  }

  /** @param {string} a */
  const agentName = (a) => agents.get(a)?.name ?? fmt.shortId(a);

  // ---------------------------------------------------------------- data in
  /** @param {any} t */
  function setTransfer(t) {
    const legs = transfer?.legs;
    transfer = { ...transfer, ...t, legs: t.legs ?? legs ?? [] };
    renderHead();
    renderVerification(verifyBox, transfer, agentName);
  }

  /** @param {any} e */
  function addEvent(e) {
    if (eventIds.has(e.id)) return;
    eventIds.add(e.id);
    events.push(e);
    if (events.length > MAX_EVENTS) eventIds.delete(events.shift().id);
    const t = Date.parse(e.at) / 1000;
    if (Number.isFinite(t)) {
      marks.push({ t, kind: markKind(e.kind) });
      const newest = store.newestTime();
      if (marks.length > 4 * MAX_EVENTS && newest !== null) marks = marks.filter((m) => m.t > newest - WINDOW_SECONDS);
      marksChanged = true;
    }
    eventsPanel.offer(e.kind);
  }

  async function live() {
    let first = true;
    while (!stopped) {
      /** @type {any[]} */ const pending = [];
      let ready = false;
      /** @param {string} name @param {any} data */
      const onEvent = (name, data) => {
        if (name === 'samples') {
          if (ready) data.forEach((/** @type {any} */ s) => store.add(s));
          else pending.push(...data);
        } else if (name === 'transfer') {
          setTransfer(data);
          if (FINAL.has(data.state)) pollTransfer();
        } else if (name === 'event') {
          addEvent(data);
        }
        schedule();
      };
      liveState.textContent = 'live';
      liveState.dataset.state = 'live';
      const feed = readEvents(`/transfers/${encodeURIComponent(id)}/live`, onEvent, abort.signal);
      try {
        const newest = store.list.reduce((t, s) => Math.max(t, s.lastTime), -Infinity);
        const history = await loadHistory(id, first ? null : newest, abort.signal);
        history.forEach((/** @type {any} */ s) => store.add(s));
        ready = true;
        pending.forEach((s) => store.add(s));
        first = false;
        schedule();
        await feed;
      } catch (e) {
        if (stopped || e instanceof Unauthorized) return;
        liveState.textContent = `live feed lost: ${e}; reconnecting`;
        liveState.dataset.state = 'lost';
      }
      if (transfer && FINAL.has(transfer.state)) {
        liveState.textContent = `the transfer is ${transfer.state}: no more samples`;
        liveState.dataset.state = 'ended';
        return;
      }
      await new Promise((r) => setTimeout(r, RECONNECT_MS));
    }
  }

  /**
   * The samples of the window (or those after `since`), oldest first. The API gives
   * the newest `limit` of them, so this pages back with `until` = the oldest time of
   * the page before; samples at that time come twice, and the store keeps the first.
   * @param {string} tid @param {number | null} since @param {AbortSignal} signal
   * @returns {Promise<any[]>}
   */
  async function loadHistory(tid, since, signal) {
    /** @type {any[][]} */ const pages = [];
    /** @type {number | null} */ let until = null;
    for (let i = 0; i < HISTORY_PAGES; i++) {
      const query = new URLSearchParams({ limit: String(HISTORY_PAGE) });
      if (since !== null) query.set('since', String(since));
      if (until !== null) query.set('until', String(until));
      const page = await api(`/transfers/${encodeURIComponent(tid)}/streams?${query}`, { signal });
      pages.push(page);
      if (page.length < HISTORY_PAGE) break;
      const newestTime = pages[0][pages[0].length - 1].time;
      if (page[0].time === until || newestTime - page[0].time >= WINDOW_SECONDS) break;
      until = page[0].time;
    }
    return pages.reverse().flat();
  }

  async function pollTransfer() {
    clearTimeout(pollTimer);
    try {
      setTransfer(await api(`/transfers/${encodeURIComponent(id)}`, { signal: abort.signal }));
    } catch (e) {
      if (stopped || e instanceof Unauthorized) return;
      if (e instanceof ApiError && e.status === 404) {
        fill(main, panel('Transfer', h('p', { class: 'error' }, `No transfer ${id} on this coordinator.`)));
        stop();
        return;
      }
    }
    if (!stopped && !(transfer && FINAL.has(transfer.state))) pollTimer = setTimeout(pollTransfer, 3000);
  }

  async function start() {
    try {
      const [t, ls, as] = await Promise.all([
        api(`/transfers/${encodeURIComponent(id)}`, { signal: abort.signal }),
        api('/links', { signal: abort.signal }),
        api('/agents', { signal: abort.signal }),
      ]);
      links = new Map(ls.map((/** @type {any} */ l) => [l.id, l]));
      agents = new Map(as.map((/** @type {any} */ a) => [a.id, a]));
      setTransfer(t);
    } catch (e) {
      if (stopped || e instanceof Unauthorized) return;
      const missing = e instanceof ApiError && e.status === 404;
      fill(main, panel('Transfer', h('p', { class: 'error' }, missing ? `No transfer ${id} on this coordinator.` : `Could not load the transfer: ${e}`)));
      return;
    }
    pollTimer = setTimeout(pollTransfer, 3000);
    live();
    pacingPanel.start();
  }

  function renderHead() {
    const t = transfer;
    const bps = t.state === 'running' ? meter.update(t.done_bytes) : null;
    const eta = t.state === 'running' ? meter.eta(t.done_bytes, t.total_bytes) : null;
    fill(
      headline,
      stateBadge(t.state),
      h('span', { class: 'figure', id: 'rate' }, `rate ${t.state === 'running' ? fmt.rate(bps) : '–'}`),
      h('span', { class: 'figure', id: 'eta' }, `ETA ${t.state === 'running' ? fmt.duration(eta) : '–'}`),
      t.last_error ? h('span', { class: 'error' }, t.last_error) : null,
    );
    progressBox.dataset.done = String(t.done_bytes);
    progressBox.dataset.total = String(t.total_bytes);
    progressBox.dataset.state = t.state;
    fill(progressBox, progressBar(t.done_bytes, t.total_bytes));
    const pathNames = (t.paths ?? []).map((/** @type {string} */ p) => links.get(p)?.name ?? fmt.shortId(p));
    fill(
      settings,
      `${t.legs.length} leg(s) × ${t.streams_per_pair} streams · links: ${pathNames.join(', ') || 'none (agents\u2019 addresses)'} · pacing ${t.pacing?.policy ?? '?'} (margin ${((t.pacing?.margin ?? 0) * 100).toFixed(0)}%) · equalizer ${t.equalizer ? 'on' : 'off'} · verify ${fmt.verification(t)} · created ${fmt.when(t.created_at)}`,
    );
    const act = (/** @type {string} */ verb, /** @type {string[]} */ from) =>
      from.includes(t.state)
        ? h('button', { type: 'button', dataset: { action: verb }, onclick: () => doAction(verb) }, verb)
        : null;
    fill(actions, act('pause', ['queued', 'running']), act('resume', ['paused', 'failed']), act('cancel', ['queued', 'running', 'paused', 'failed']));
  }

  /** @param {string} verb */
  async function doAction(verb) {
    actionError.textContent = '';
    try {
      setTransfer(await api(`/transfers/${encodeURIComponent(id)}/${verb}`, { method: 'POST' }));
    } catch (e) {
      if (!(e instanceof Unauthorized)) actionError.textContent = `${verb}: ${e}`;
    }
  }

  function renderStreams() {
    const newest = store.newestTime();
    const rows = store.list.map((s, i) => {
      const x = s.last;
      const stale = newest !== null && s.lastTime < newest - 5;
      return h(
        'tr',
        { class: stale ? 'stale' : '' },
        h('td', null, h('span', { class: 'swatch', style: `background: ${streamColor(i)}` }), ` ${s.label}`),
        h('td', { class: 'mono' }, pathName(s.path)),
        h('td', { class: 'num' }, fmt.rate(x?.bits_per_second)),
        h('td', { class: 'num' }, fmt.bytes(x?.snd_cwnd)),
        h('td', { class: 'num' }, x?.rtt ? `${(x.rtt / 1000).toFixed(1)} ms` : '–'),
        h('td', { class: 'num' }, x?.cap ?? '–'),
        h('td', { class: 'num' }, s.retransmits),
        h('td', { dataset: { held: heldBack(x) } }, heldBack(x)),
        h('td', { class: 'num' }, s.samples),
      );
    });
    fill(streamTable, rows.length ? table(['Stream', 'Path', 'Rate', 'cwnd', 'RTT', 'Cap (seg)', 'Retransmits', 'Held back', 'Samples'], rows, { class: 'compact' }) : h('p', { class: 'empty' }, 'No samples yet.'));
  }

  /**
   * What held the stream back over its last interval (TCP_INFO): idle (nothing to
   * send), stalled on the receiver's window, stalled on the send buffer; shares of 5%
   * or more, or "–" when the sample does not say.
   * @param {import('../telemetry.js').Sample | null} x
   */
  function heldBack(x) {
    if (x?.busy == null) return '–';
    const parts = [['idle', 1 - x.busy], ['rwnd', x.rwnd_limited ?? 0], ['sndbuf', x.sndbuf_limited ?? 0]]
      .filter(([, v]) => /** @type {number} */ (v) >= 0.05)
      .map(([name, v]) => `${name} ${Math.round(/** @type {number} */ (v) * 100)}%`);
    return parts.length ? parts.join(' · ') : 'nothing';
  }

  /** The link a path id ("LOCAL=REMOTE:PORT") goes over, by its NICs' addresses. @param {string | null} path */
  function pathName(path) {
    if (!path) return '–';
    const local = path.split('=')[0];
    for (const l of links.values()) {
      const a = agents.get(l.agent_a)?.nics?.find((/** @type {any} */ n) => n.name === l.nic_a)?.address;
      const b = agents.get(l.agent_b)?.nics?.find((/** @type {any} */ n) => n.name === l.nic_b)?.address;
      if (local && (local === a || local === b)) return `${l.name} (${path})`;
    }
    return path;
  }

  function renderPaths() {
    const newest = store.newestTime();
    /** @type {Map<string, import('../telemetry.js').Stream[]>} */
    const byPath = new Map();
    for (const s of store.list) {
      const key = s.path ?? '';
      byPath.set(key, [...(byPath.get(key) ?? []), s]);
    }
    const running = transfer?.state === 'running';
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
        h('td', { class: 'mono' }, path ? pathName(path) : '(no path id)'),
        h('td', null, h('span', { class: `badge path-${state}` }, state)),
        h('td', { class: 'num' }, `${fresh.length}/${streams.length}`),
        h('td', { class: 'num' }, fmt.rate(bps)),
        h('td', { class: 'num' }, rtt === null ? '–' : `${rtt.toFixed(1)} ms`),
        h('td', { class: 'num' }, retrans),
      );
    });
    const pathEvents = events.filter((e) => e.kind.includes('path')).slice(-20).reverse();
    fill(
      pathsBox,
      rows.length ? table(['Path', 'State', 'Streams (fresh/all)', 'Rate', 'RTT (median)', 'Retransmits'], rows, { class: 'compact' }) : h('p', { class: 'empty' }, 'No samples yet.'),
      h('p', { class: 'hint' }, 'State from the samples: carrying (bytes acknowledged in the last 3 s), stalled (samples, no bytes), silent (no sample for 3 s while the transfer runs).'),
      pathEvents.length
        ? table(['Time', 'Path event'], pathEvents.map((e) => h('tr', null, h('td', null, fmt.when(e.at)), h('td', null, e.detail))), { class: 'compact' })
        : h('p', { class: 'hint' }, 'No path events for this transfer.'),
    );
  }

  const onResize = () => {
    Object.values(charts).forEach((c) => c.resize());
    pacingPanel.resize();
    drawnVersion = -1; // the heatmap redraws at its new width
    schedule();
  };
  window.addEventListener('resize', onResize);
  start();

  function stop() {
    stopped = true;
    abort.abort();
    clearTimeout(pollTimer);
    clearTimeout(tableTimer);
    pacingPanel.stop();
    window.removeEventListener('resize', onResize);
    Object.values(charts).forEach((c) => c.destroy());
  }
  return stop;
}
