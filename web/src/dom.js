// A few DOM helpers: elements are built with textContent only (never innerHTML with data).

/**
 * h('div', {class: 'x', dataset: {id: 1}, onclick: fn}, 'text', child, [more])
 * @param {string} tag
 * @param {Record<string, any> | null} [attrs]
 * @param {...any} children
 * @returns {HTMLElement}
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else if (key in el && typeof value !== 'string') /** @type {any} */ (el)[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

/** @param {ParentNode} parent @param {any[]} children */
function append(parent, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces the children of `el`. @param {Element} el @param {...any} children */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A titled panel. @param {string} title @param {...any} children */
export function panel(title, ...children) {
  return h('section', { class: 'panel' }, h('h2', null, title), ...children);
}

/** A table from header names and its rows (``tr`` elements). */
export function table(/** @type {string[]} */ heads, /** @type {HTMLElement[]} */ rows, attrs = {}) {
  return h(
    'table',
    attrs,
    h('thead', null, h('tr', null, heads.map((x) => h('th', null, x)))),
    h('tbody', null, rows),
  );
}
