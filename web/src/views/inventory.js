// Agents, volume sets (and the agents' volumes) and links, as the registry has them.

import { all, Unauthorized } from '../api.js';
import { fill, h, panel, table } from '../dom.js';
import * as fmt from '../format.js';

const REFRESH_MS = 5000;

/**
 * A page that loads `paths`, renders them, and refreshes every 5 s.
 * @param {HTMLElement} main @param {string} title @param {string[]} paths
 * @param {(...data: any[]) => any} render
 */
function page(main, title, paths, render) {
  const box = h('div', { id: `${title.toLowerCase().replace(/\W+/g, '-')}-list` }, 'Loading…');
  fill(main, panel(title, box));
  let stopped = false;
  /** @type {ReturnType<typeof setTimeout> | undefined} */ let timer;
  async function refresh() {
    try {
      const data = await Promise.all(paths.map((p) => all(p)));
      if (!stopped) fill(box, render(...data));
    } catch (e) {
      if (e instanceof Unauthorized || stopped) return;
      fill(box, h('p', { class: 'error' }, `Could not load: ${e}`));
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
  }
  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** @param {HTMLElement} main */
export function agentsView(main) {
  return page(main, 'Agents', ['/agents'], (/** @type {any[]} */ agents) => {
    if (!agents.length) return h('p', { class: 'empty' }, 'No agents registered.');
    const rows = agents.map((a) =>
      h(
        'tr',
        { dataset: { agent: a.name } },
        h('td', null, h('strong', null, a.name), h('div', { class: 'mono small' }, a.id)),
        h('td', null, h('span', { class: `badge agent-${a.status}` }, a.status), a.version ? ` v${a.version}` : ''),
        h('td', null, fmt.when(a.last_heartbeat_at)),
        h('td', { class: 'mono small' }, a.control_url),
        h('td', null, a.nics.map((/** @type {any} */ n) => h('div', null, `${n.name} ${n.address} (${fmt.rate(n.speed_bps)})`))),
        h('td', null, a.volumes.map((/** @type {any} */ v) => h('div', null, `${v.name}: ${v.path ?? `${v.iqn} lun ${v.lun}`} (${fmt.bytes(v.size_bytes)})`))),
        h('td', null, a.capabilities.join(', ') || '–'),
      ),
    );
    return table(['Agent', 'Status', 'Last heartbeat', 'Control API', 'NICs', 'Volumes', 'Capabilities'], rows);
  });
}

/** @param {HTMLElement} main */
export function volumesView(main) {
  return page(main, 'Volume sets', ['/volume-sets'], (/** @type {any[]} */ sets) => {
    if (!sets.length) return h('p', { class: 'empty' }, 'No volume sets. The agents\u2019 own volumes are on the Agents page.');
    const rows = sets.map((s) =>
      h(
        'tr',
        { dataset: { set: s.name } },
        h('td', null, h('strong', null, s.name), h('div', { class: 'mono small' }, s.id)),
        h('td', null, s.members.map((/** @type {any} */ m) => h('div', null, `${m.agent_name}:${m.volume} (${fmt.bytes(m.size_bytes)})`))),
        h('td', { class: 'num' }, fmt.bytes(s.stripe_unit)),
        h('td', { class: 'num' }, fmt.bytes(s.capacity_bytes)),
        h('td', null, fmt.when(s.created_at)),
      ),
    );
    return table(['Volume set', 'Members', 'Stripe unit', 'Capacity', 'Created'], rows);
  });
}

/** @param {HTMLElement} main */
export function linksView(main) {
  return page(main, 'Links', ['/links', '/agents'], (/** @type {any[]} */ links, /** @type {any[]} */ agents) => {
    if (!links.length) return h('p', { class: 'empty' }, 'No links registered.');
    const names = new Map(agents.map((a) => [a.id, a.name]));
    const rows = links.map((l) =>
      h(
        'tr',
        { dataset: { link: l.name } },
        h('td', null, h('strong', null, l.name), h('div', { class: 'mono small' }, l.id)),
        h('td', null, `${names.get(l.agent_a) ?? l.agent_a}:${l.nic_a} ↔ ${names.get(l.agent_b) ?? l.agent_b}:${l.nic_b}`),
        h('td', { class: 'num' }, fmt.rate(l.capacity_bps)),
        h('td', { class: 'num' }, `${l.rtt_ms} ms`),
        h('td', { class: 'num' }, fmt.bytes((l.capacity_bps / 8) * (l.rtt_ms / 1000))),
        h('td', null, l.source),
      ),
    );
    return table(['Link', 'Ends', 'Capacity', 'RTT', 'BDP', 'Source'], rows);
  });
}
