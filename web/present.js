// A pending permission request as the daemon presents it (`GET /session/{id}/permission/{requestId}`,
// `src/present.rs`): the sections the terminal client, the `/act` page and the notifications show,
// in the same order — what it would run and where, the locations, the diffs (whitespace made
// visible), the file text and every other input, the output, and what each option carries (a patch
// to apply, a changed command). The daemon has already revealed every text and bounded each
// section; this module only lays the lines out, as text nodes, sets the reveal marks apart (as
// `reveal.js` does), shows paths inside the workspace relative to it (the whole path on hover: a
// phone has no room for `/home/…/project/`), and says what was left out.

import { h, shortPath } from './dom.js';

const TONE_CLASS = { added: 'diff-add', removed: 'diff-del', hunk: 'diff-hunk', note: 'present-note', plain: 'diff-ctx' };

/** What `src/text.rs` writes in place of what it reveals: an escape, or a run's length. */
const MARK = /(⟪[^⟪⟫]{1,40}⟫|\\u\{[0-9a-f]{1,6}\}|\\[nrt])/;

function plural(n, one) {
  return `${n} ${one}${n === 1 ? '' : 's'}`;
}

/** Revealed text as nodes, its marks set apart (`span.reveal`). */
export function marked(text) {
  return String(text ?? '').split(MARK).map((piece, i) => (i % 2 ? h('span', { class: 'reveal' }, piece) : piece)).filter((p) => p !== '');
}

/** A heading naming a file (`diff /w/a.rs`, `new file /w/a.rs`): the path shortened, whole on hover. */
function heading(text, cwd) {
  const m = /^(diff|new file) (\/.*)$/.exec(text);
  if (!m) return h('figcaption', {}, marked(text));
  return h('figcaption', { title: m[2] }, `${m[1]} `, marked(shortPath(m[2], cwd)));
}

/** One line; a location is a path, shortened like a heading's. */
function line(l, location, cwd) {
  const text = String(l.text ?? '');
  const path = location && text.startsWith('/') ? shortPath(text, cwd) : text;
  return h('span', { class: TONE_CLASS[l.tone] || 'diff-ctx', title: path !== text ? text : undefined },
    marked(path),
    l.cutChars ? h('span', { class: 'present-cut' }, ` … ${plural(l.cutChars, 'more character')}`) : null,
    '\n');
}

/** One section: its heading, its lines (toned), what was left out. */
function section(s, cwd) {
  const location = s.heading === 'locations';
  return h('figure', { class: 'diff present-section', dataset: { heading: String(s.heading ?? '') } },
    heading(String(s.heading ?? ''), cwd),
    h('pre', { 'aria-label': String(s.heading ?? '') }, (s.lines || []).map((l) => line(l, location, cwd))),
    s.omittedLines ? h('p', { class: 'present-cut' }, `… ${plural(s.omittedLines, 'more line')}`) : null);
}

/**
 * The daemon's warning first (a request outside the workspace: it will be refused whatever is
 * answered), the request's sections, then each option that carries something, with it; and, when
 * anything was left out, a "Show all" button calling `showAll()`. `cwd`: the session's workspace.
 */
export function renderPresented(p, showAll, cwd) {
  const options = (p.options || []).filter((o) => o.sections?.length);
  return [
    p.warning ? h('p', { class: 'present-warning', role: 'alert' }, marked(p.warning)) : null,
    (p.sections || []).map((s) => section(s, cwd)),
    options.map((o) => h('div', { class: 'present-option' },
      h('p', { class: 'present-option-name' }, 'Option “', marked(o.name), '” carries:'),
      o.sections.map((s) => section(s, cwd)))),
    p.whole ? null : h('button', { type: 'button', class: 'ghost show-all', onclick: showAll }, 'Show all'),
  ];
}
