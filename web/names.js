// One identity, shown one way everywhere (the twin of `identity` in src/audit.rs): a paired
// device by its name, with its id on demand; a client without a name by its id.

import { h } from './dom.js';

/** `my phone`, or `my phone (dev-…)` with `withId`; the id alone when there is no name. */
export function identity(name, id, withId = false) {
  if (!name) return id || '';
  return withId && id && id !== name ? `${name} (${id})` : name;
}

/**
 * An identity on screen: its name, and its id on demand (a click or a tap adds it, another takes
 * it away; the title has it for a pointer). Until asked, the element's text is the name alone.
 */
export function identityEl(name, id) {
  if (!name || name === id) return h('span', { class: 'identity' }, id || '');
  const idEl = h('span', { class: 'identity-id' }, ` (${id})`);
  const el = h('button', {
    type: 'button', class: 'identity', title: id, 'aria-label': `${name}: show the id`, 'aria-expanded': 'false',
    onclick: () => {
      const show = !idEl.isConnected;
      if (show) el.append(idEl);
      else idEl.remove();
      el.setAttribute('aria-expanded', String(show));
    },
  }, name);
  return el;
}
