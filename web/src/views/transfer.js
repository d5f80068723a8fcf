// One transfer: its head (progress, settings, actions), the live per-stream charts
// (throughput, heatmap, cwnd, RTT, caps), the aggregate against the bottleneck, the
// streams table, per-path state, per-NIC pacing, the events log and, once the legs are
// completed, their verification. Each panel is a module of transfer/; this page fetches
// the data, feeds the panels and schedules their drawing.
//
// Data: GET /transfers/{id} (legs, every 3 s until final), /links and /agents (names,
// capacities), /transfers/{id}/streams (the history at opening), the live feed
// /transfers/{id}/live (server-sent events: transfer, event, samples); pacing.js
// fetches its own. Samples go into ring buffers (telemetry.js: the last 10 minutes);
// charts redraw at most one per animation frame, and tables at most once a second.

import { all, api, ApiError, readEvents, Unauthorized } from '../api.js';
import { streamColor } from '../charts.js';
import { fill, h, panel } from '../dom.js';
import * as fmt from '../format.js';
import { TelemetryStore } from '../telemetry.js';
import { FINAL } from './transfers.js';
import { AggregatePanel, bottleneck } from './transfer/aggregate.js';
import { CapsPanel } from './transfer/caps.js';
import { CwndPanel, RttPanel } from './transfer/cwnd.js';
import { EventsPanel, markKind } from './transfer/events.js';
import { HeadPanel } from './transfer/head.js';
import { HeatmapPanel } from './transfer/heatmap.js';
import { PacingPanel } from './transfer/pacing.js';
import { pathName, PathsPanel } from './transfer/paths.js';
import { StreamTable } from './transfer/stream-table.js';
import { StreamsPanel } from './transfer/streams.js';
import { renderVerification } from './transfer/verification.js';

const WINDOW_SECONDS = 600;
const MAX_EVENTS = 5000;
const RECONNECT_MS = 2000;
const HISTORY_PAGE = 10000; // the API's largest limit
const HISTORY_PAGES = 12; // 120000 samples: the whole window at 64 streams and 2 Hz

/** @typedef {import('./transfer/stream-chart.js').Series} Series */
/**
 * A chart of the page, drawn from the store (and the series: one line per stream).
 * @typedef {{draw: (store: TelemetryStore, series: Series) => void, resize: () => void, destroy: () => void}} PageChart
 */

/** @param {HTMLElement} main @param {string} id */
export function transferView(main, id) {
  const store = new TelemetryStore({ windowSeconds: WINDOW_SECONDS });
  const abort = new AbortController();
  const signal = abort.signal; // aborted when the page goes
  /** @type {any} */ let transfer = null;
  /** @type {Map<string, any>} */ const links = new Map();
  /** @type {Map<string, any>} */ const agents = new Map();
  /** @type {any[]} */ const events = [];
  const eventIds = new Set();
  /** @type {{t: number, kind: string}[]} */ let marks = [];
  /** @type {ReturnType<typeof setTimeout> | undefined} */ let pollTimer;

  /** @param {string} a */
  const agentName = (a) => agents.get(a)?.name ?? fmt.shortId(a);
  /** @param {string | null} p */
  const nameOfPath = (p) => pathName(p, links, agents);
  const ticks = () => marks;

  // ---------------------------------------------------------------- panels
  const head = new HeadPanel(id, links, setTransfer);
  const streams = new StreamsPanel(ticks);
  const heatmap = new HeatmapPanel();
  const aggregate = new AggregatePanel(ticks, () => bottleneck(transfer, links));
  const cwnd = new CwndPanel(ticks);
  const rtt = new RttPanel(ticks);
  const caps = new CapsPanel(ticks);
  const streamTable = new StreamTable(store, nameOfPath);
  const paths = new PathsPanel(store, events, nameOfPath);
  const pacing = new PacingPanel(id, () => transfer, signal);
  const eventsPanel = new EventsPanel(events);
  const verifyBox = h('div', { id: 'verification' });
  fill(
    main,
    head.box,
    panel('Throughput per stream (bit/s)', streams.legend, streams.liveState, streams.box),
    panel('Throughput per stream: heatmap', heatmap.hint, heatmap.box),
    panel('Aggregate and bottleneck (bit/s)', aggregate.hint, aggregate.box),
    h('div', { class: 'two' }, panel('cwnd per stream', cwnd.box), panel('RTT per stream', rtt.box)),
    panel('cwnd caps set by the equalizer (segments)', caps.hint, caps.box),
    panel('Streams', streamTable.box),
    h('div', { class: 'two' }, panel('Paths', paths.box), panel('Per-NIC pacing', pacing.box, pacing.chartBox)),
    panel('Events', h('label', null, 'Show ', eventsPanel.filter), eventsPanel.box),
    panel('Verification', verifyBox),
  );
  /** @type {PageChart[]} in the order they redraw */
  const charts = [streams, heatmap, aggregate, cwnd, rtt, caps];
  const redraws = new Redraws(store, charts, renderTables, (cost) => streams.showCost(cost));

  function renderTables() {
    streamTable.render();
    paths.render(transfer?.state === 'running');
    eventsPanel.render();
  }

  // ---------------------------------------------------------------- data in
  /** @param {any} t */
  function setTransfer(t) {
    const legs = transfer?.legs;
    transfer = { ...transfer, ...t, legs: t.legs ?? legs ?? [] };
    head.render(transfer);
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
      redraws.all();
    }
    eventsPanel.offer(e.kind);
  }

  async function live() {
    let first = true;
    while (!signal.aborted) {
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
        redraws.schedule();
      };
      streams.showFeed('live', 'live');
      const feed = readEvents(`/transfers/${encodeURIComponent(id)}/live`, onEvent, signal);
      try {
        const newest = store.list.reduce((t, s) => Math.max(t, s.lastTime), -Infinity);
        const history = await loadHistory(id, first ? null : newest, signal);
        history.forEach((/** @type {any} */ s) => store.add(s));
        ready = true;
        pending.forEach((s) => store.add(s));
        first = false;
        redraws.schedule();
        await feed;
      } catch (e) {
        if (signal.aborted || e instanceof Unauthorized) return;
        streams.showFeed('lost', `live feed lost: ${e}; reconnecting`);
      }
      if (transfer && FINAL.has(transfer.state)) {
        streams.showFeed('ended', `the transfer is ${transfer.state}: no more samples`);
        return;
      }
      await new Promise((r) => setTimeout(r, RECONNECT_MS));
    }
  }

  async function pollTransfer() {
    clearTimeout(pollTimer);
    try {
      setTransfer(await api(`/transfers/${encodeURIComponent(id)}`, { signal }));
    } catch (e) {
      if (signal.aborted || e instanceof Unauthorized) return;
      if (e instanceof ApiError && e.status === 404) {
        fill(main, panel('Transfer', h('p', { class: 'error' }, `No transfer ${id} on this coordinator.`)));
        stop();
        return;
      }
    }
    if (!signal.aborted && !(transfer && FINAL.has(transfer.state))) pollTimer = setTimeout(pollTransfer, 3000);
  }

  async function start() {
    try {
      const [t, ls, as] = await Promise.all([
        api(`/transfers/${encodeURIComponent(id)}`, { signal }),
        all('/links', signal),
        all('/agents', signal),
      ]);
      ls.forEach((/** @type {any} */ l) => links.set(l.id, l));
      as.forEach((/** @type {any} */ a) => agents.set(a.id, a));
      setTransfer(t);
    } catch (e) {
      if (signal.aborted || e instanceof Unauthorized) return;
      const missing = e instanceof ApiError && e.status === 404;
      fill(main, panel('Transfer', h('p', { class: 'error' }, missing ? `No transfer ${id} on this coordinator.` : `Could not load the transfer: ${e}`)));
      return;
    }
    pollTimer = setTimeout(pollTransfer, 3000);
    live();
    pacing.start();
  }

  const onResize = () => {
    charts.forEach((c) => c.resize());
    pacing.resize();
    redraws.all(); // the heatmap redraws at its new width
  };
  window.addEventListener('resize', onResize);
  start();

  function stop() {
    abort.abort();
    clearTimeout(pollTimer);
    redraws.stop();
    pacing.stop();
    window.removeEventListener('resize', onResize);
    charts.forEach((c) => c.destroy());
  }
  return stop;
}

/**
 * The page's drawing. New samples mark every chart dirty; each animation frame redraws
 * ONE dirty chart (or, with none dirty, the tables, at most once a second), so no frame
 * carries the cost of all of them: with 64 streams a chart costs a few ms, all of them tens.
 */
class Redraws {
  /**
   * @param {TelemetryStore} store
   * @param {PageChart[]} charts in the order they redraw
   * @param {() => void} tables renders the tables
   * @param {(cost: {mean: number, max: number}) => void} measured told the work of each frame that drew a chart (ms)
   */
  constructor(store, charts, tables, measured) {
    this.store = store;
    this.charts = charts;
    this.tables = tables;
    this.measured = measured;
    /** @type {Set<PageChart>} */ this.dirty = new Set();
    /** @type {Series} */ this.series = [];
    this.requested = false;
    this.stopped = false;
    this.drawnVersion = -1; // the store's version the charts were last marked for
    this.tablesAt = 0;
    /** @type {ReturnType<typeof setTimeout> | undefined} */ this.tableTimer = undefined;
    this.cost = { mean: 0, max: 0, n: 0 };
  }

  schedule() {
    if (this.requested || this.stopped) return;
    this.requested = true;
    requestAnimationFrame(() => this.frame());
  }

  /** Every chart redraws, new samples or not (the event ticks or the page's width changed). */
  all() {
    this.drawnVersion = -1;
    this.schedule();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.tableTimer);
  }

  frame() {
    this.requested = false;
    if (this.stopped) return;
    const began = performance.now();
    const store = this.store;
    if (store.version !== this.drawnVersion) {
      this.drawnVersion = store.version;
      this.series = store.list.map((s, i) => ({ label: s.label, stroke: streamColor(i) }));
      this.charts.forEach((c) => this.dirty.add(c));
    }
    const [chart] = this.dirty;
    if (chart !== undefined) {
      this.dirty.delete(chart);
      chart.draw(store, this.series);
      const took = performance.now() - began;
      const cost = this.cost;
      cost.mean = cost.n ? 0.9 * cost.mean + 0.1 * took : took;
      cost.max = Math.max(cost.max, took);
      cost.n += 1;
      this.measured(cost);
      this.schedule(); // the next dirty chart, or the tables
      return;
    }
    const now = performance.now();
    if (now - this.tablesAt > 1000) {
      this.tablesAt = now;
      this.tables();
    } else if (this.tableTimer === undefined) {
      this.tableTimer = setTimeout(() => {
        this.tableTimer = undefined;
        this.schedule();
      }, 1000 - (now - this.tablesAt));
    }
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
