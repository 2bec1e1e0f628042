// One identity, shown one way everywhere (the twin of `identity` in src/audit.rs): a paired
// device by its name, with its id on demand; a client without a name by its id.

import { h } from './dom.js';

/** `my phone`, or `my phone (dev-…)` with `withId`; the id alone when there is no name. */
export function identity(name, id, withId = false) {
  if (!name) return id || '';
  return withId && id && id !== name ? `${name} (${id})` : name;
}

/**
 * An identity on screen: its name, and its id on demand (a click or a tap shows it, again hides
 * it; the title has it for a pointer).
 */
export function identityEl(name, id) {
  if (!name || name === id) return h('span', { class: 'identity' }, id || '');
  const idEl = h('span', { class: 'identity-id', hidden: true }, ` (${id})`);
  return h('button', {
    type: 'button', class: 'identity', title: id, 'aria-label': `${name}: show the id`,
    onclick: () => {
      idEl.hidden = !idEl.hidden;
    },
  }, name, idEl);
}
