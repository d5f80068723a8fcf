// The login: a user's API token, checked against the coordinator before anything else.

import { acceptsToken, token } from '../api.js';
import { fill, h } from '../dom.js';

/**
 * @param {HTMLElement} root
 * @param {string | undefined} message why the login shows (a refused token, ...)
 * @param {() => void} done called once the coordinator accepted the token
 */
export function loginView(root, message, done) {
  const input = h('input', {
    type: 'password',
    id: 'token',
    name: 'token',
    autocomplete: 'off',
    required: true,
    placeholder: 'a user token of this coordinator',
  });
  const error = h('p', { class: 'error', id: 'login-error', role: 'alert' }, message ?? '');
  const form = h(
    'form',
    { id: 'login', class: 'login' },
    h('h1', null, 'Reservoir'),
    h('label', { for: 'token' }, 'API token'),
    input,
    h('button', { type: 'submit' }, 'Sign in'),
    error,
    h('p', { class: 'hint' }, 'The token is kept in this tab only (sessionStorage).'),
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const value = /** @type {HTMLInputElement} */ (input).value.trim();
    if (!value) return;
    error.textContent = 'Checking…';
    try {
      if (await acceptsToken(value)) {
        token.set(value);
        done();
      } else {
        token.clear();
        error.textContent = 'The coordinator refused this token (401).';
      }
    } catch (e) {
      error.textContent = `The coordinator did not answer: ${e}`;
    }
  });
  fill(root, form);
  input.focus();
}
