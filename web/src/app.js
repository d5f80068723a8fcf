// The dashboard's shell: the login gate, the navigation and a hash router.
//
// Nothing but the login form is rendered until the coordinator has accepted the token
// (GET /api/v1/agents answers 200); a 401 on any call later comes back here.

import { api, onUnauthorized, token, Unauthorized } from './api.js';
import { fill, h } from './dom.js';
import { campaignsView, campaignView } from './views/campaigns.js';
import { agentsView, linksView, volumesView } from './views/inventory.js';
import { loginView } from './views/login.js';
import { transferView } from './views/transfer.js';
import { transfersView } from './views/transfers.js';

const root = /** @type {HTMLElement} */ (document.getElementById('app'));

/** @typedef {(main: HTMLElement, ...params: string[]) => (() => void) | void} View */

/** @type {[RegExp, View, string][]} route, view, navigation entry */
const ROUTES = [
  [/^#\/transfers\/([^/]+)$/, transferView, 'transfers'],
  [/^#\/transfers$/, transfersView, 'transfers'],
  [/^#\/agents$/, agentsView, 'agents'],
  [/^#\/volumes$/, volumesView, 'volumes'],
  [/^#\/links$/, linksView, 'links'],
  [/^#\/campaigns\/([^/]+)$/, campaignView, 'campaigns'],
  [/^#\/campaigns$/, campaignsView, 'campaigns'],
];
const NAV = [
  ['transfers', 'Transfers'],
  ['agents', 'Agents'],
  ['volumes', 'Volumes'],
  ['links', 'Links'],
  ['campaigns', 'Campaigns'],
];

/** @type {(() => void) | void} */
let cleanup;
let verified = false;

function leave() {
  if (typeof cleanup === 'function') cleanup();
  cleanup = undefined;
}

/** @param {string} [message] */
function showLogin(message) {
  leave();
  verified = false;
  root.dataset.view = 'login';
  cleanup = loginView(root, message, async () => {
    verified = true;
    const target = sessionStorage.getItem('reservoir.after-login') || '#/transfers';
    sessionStorage.removeItem('reservoir.after-login');
    if (location.hash === target) route();
    else location.hash = target;
  });
}

onUnauthorized((why) => {
  if (location.hash && location.hash !== '#/login') {
    sessionStorage.setItem('reservoir.after-login', location.hash);
  }
  showLogin(why);
});

async function route() {
  if (!token.get()) {
    showLogin();
    return;
  }
  if (!verified) {
    try {
      await api('/agents');
      verified = true;
    } catch (e) {
      if (!(e instanceof Unauthorized)) showLogin(`The coordinator did not answer: ${e}`);
      return;
    }
  }
  const hash = location.hash || '#/transfers';
  const found = ROUTES.find(([re]) => re.test(hash));
  if (!found) {
    location.hash = '#/transfers';
    return;
  }
  const [re, view, section] = found;
  const params = /** @type {RegExpExecArray} */ (re.exec(hash)).slice(1).map(decodeURIComponent);
  leave();
  const main = h('main', { id: 'main' });
  fill(root, shell(section), main);
  root.dataset.view = section;
  cleanup = view(main, ...params);
}

/** @param {string} section */
function shell(section) {
  const links = NAV.map(([key, label]) =>
    h('a', { href: `#/${key}`, class: key === section ? 'active' : '', dataset: { nav: key } }, label),
  );
  const logout = h(
    'button',
    {
      type: 'button',
      class: 'link',
      id: 'logout',
      onclick: () => {
        token.clear();
        showLogin('Signed out.');
      },
    },
    'Sign out',
  );
  return h('header', { class: 'top' }, h('span', { class: 'brand' }, 'Reservoir'), h('nav', null, links), logout);
}

window.addEventListener('hashchange', () => {
  if (location.hash !== '#/login') route();
});
route().finally(() => {
  root.dataset.ready = 'true';
});
