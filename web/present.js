// A pending permission request as the daemon presents it (`GET /session/{id}/permission/{requestId}`,
// `src/present.rs`): the sections the terminal client, the `/act` page and the notifications show,
// in the same order — what it would run and where, the locations, the diffs (whitespace made
// visible), the file text and every other input, the output, and what each option carries (a patch
// to apply, a changed command). The daemon has already revealed every text and bounded each
// section; this module only lays the lines out, as text nodes, and says what was left out.

import { h } from './dom.js';

const TONE_CLASS = { added: 'diff-add', removed: 'diff-del', hunk: 'diff-hunk', note: 'present-note', plain: 'diff-ctx' };

function plural(n, one) {
  return `${n} ${one}${n === 1 ? '' : 's'}`;
}

/** One section: its heading, its lines (toned), what was left out. */
function section(s) {
  const lines = (s.lines || []).map((l) => h('span', { class: TONE_CLASS[l.tone] || 'diff-ctx' },
    String(l.text ?? ''),
    l.cutChars ? h('span', { class: 'present-cut' }, ` … ${plural(l.cutChars, 'more character')}`) : null,
    '\n'));
  return h('figure', { class: 'diff present-section' },
    h('figcaption', {}, String(s.heading ?? '')),
    h('pre', { 'aria-label': String(s.heading ?? '') }, lines),
    s.omittedLines ? h('p', { class: 'present-cut' }, `… ${plural(s.omittedLines, 'more line')}`) : null);
}

/**
 * The request's sections, then each option that carries something, with it; and, when anything
 * was left out, a "Show all" button calling `showAll()`.
 */
export function renderPresented(p, showAll) {
  const options = (p.options || []).filter((o) => o.sections?.length);
  return [
    (p.sections || []).map(section),
    options.map((o) => h('div', { class: 'present-option' },
      h('p', { class: 'present-option-name' }, `Option “${o.name}” carries:`),
      o.sections.map(section))),
    p.whole ? null : h('button', { type: 'button', class: 'ghost show-all', onclick: showAll }, 'Show all'),
  ];
}
