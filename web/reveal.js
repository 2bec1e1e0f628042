// What a person decides on is shown as it is, with nothing hidden: the browser twin of the daemon's
// `src/text.rs` (the same tables, the same escapes). A control, bidi or invisible character is
// written as an escape (`\n`, `\u{202e}`) — a right-to-left override cannot reverse a command, a
// zero-width space cannot hide in a path; a run of more than three blanks, or of one invisible
// character, is written as its length (`⟪300 spaces⟫`) — padding cannot push the end of a command
// out of sight; a stack of more than two combining marks on one letter is escaped past the second.

/** Blanks (or copies of one invisible character) shown as themselves in a row (`MAX_BLANK_RUN`). */
const MAX_BLANK_RUN = 3;
/** Combining marks kept on one base character (`MAX_MARKS_PER_BASE`). */
const MAX_MARKS_PER_BASE = 2;

/** Characters never shown as themselves; sorted, inclusive (`HIDDEN` in src/text.rs). */
const HIDDEN = [
  [0x0000, 0x001f], [0x007f, 0x009f], [0x00ad, 0x00ad], [0x034f, 0x034f], [0x0600, 0x0605],
  [0x061c, 0x061c], [0x06dd, 0x06dd], [0x070f, 0x070f], [0x0890, 0x0891], [0x08e2, 0x08e2],
  [0x115f, 0x1160], [0x17b4, 0x17b5], [0x180b, 0x180f], [0x200b, 0x200f], [0x2028, 0x202e],
  [0x2060, 0x206f], [0x3164, 0x3164], [0xfeff, 0xfeff], [0xffa0, 0xffa0], [0xfff9, 0xfffb],
  [0x110bd, 0x110bd], [0x110cd, 0x110cd], [0x13430, 0x1343f], [0x1bca0, 0x1bca3], [0x1d173, 0x1d17a],
  [0xe0000, 0xe0fff],
];
/** The generic combining diacritic blocks (`STACKING_MARKS`). */
const STACKING_MARKS = [[0x0300, 0x036f], [0x1ab0, 0x1aff], [0x1dc0, 0x1dff], [0x20d0, 0x20ff], [0xfe20, 0xfe2f]];

function inTable(table, cp) {
  let lo = 0;
  let hi = table.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (table[mid][1] < cp) lo = mid + 1;
    else if (table[mid][0] > cp) hi = mid - 1;
    else return true;
  }
  return false;
}

function isHidden(ch) {
  return inTable(HIDDEN, ch.codePointAt(0));
}

/** Unicode's White_Space (what Rust's `char::is_whitespace` reads), and the braille blank. */
const BLANKS = [
  [0x0009, 0x000d], [0x0020, 0x0020], [0x0085, 0x0085], [0x00a0, 0x00a0], [0x1680, 0x1680],
  [0x2000, 0x200a], [0x2028, 0x2029], [0x202f, 0x202f], [0x205f, 0x205f], [0x2800, 0x2800],
  [0x3000, 0x3000],
];

function isBlank(ch) {
  return inTable(BLANKS, ch.codePointAt(0));
}

function escapeOf(ch) {
  if (ch === '\n') return '\\n';
  if (ch === '\r') return '\\r';
  if (ch === '\t') return '\\t';
  return `\\u{${ch.codePointAt(0).toString(16)}}`;
}

/**
 * `text` as pieces: `{text}` to show as it is, `{mark}` for an escape or a run's length (which a
 * page shows apart, so nobody takes it for the agent's words).
 */
export function revealPieces(text) {
  const chars = Array.from(String(text ?? ''));
  const pieces = [];
  let plain = '';
  const mark = (m) => {
    if (plain) pieces.push({ text: plain });
    plain = '';
    pieces.push({ mark: m });
  };
  let marks = 0;
  const shown = (ch) => {
    if (inTable(STACKING_MARKS, ch.codePointAt(0))) {
      marks++;
      if (marks > MAX_MARKS_PER_BASE) mark(escapeOf(ch));
      else plain += ch;
      return;
    }
    marks = 0;
    if (isHidden(ch)) mark(escapeOf(ch));
    else plain += ch;
  };
  let i = 0;
  while (i < chars.length) {
    const ch = chars[i];
    let run = 1;
    if (isBlank(ch)) while (i + run < chars.length && isBlank(chars[i + run])) run++;
    else if (isHidden(ch)) while (i + run < chars.length && chars[i + run] === ch) run++;
    if (run <= MAX_BLANK_RUN) {
      for (let k = i; k < i + run; k++) shown(chars[k]);
    } else {
      marks = 0;
      const same = chars.slice(i, i + run).every((c) => c === ch);
      if (same && ch === ' ') mark(`⟪${run} spaces⟫`);
      else if (same) mark(`⟪${run} × ${isHidden(ch) || isBlank(ch) ? escapeOf(ch) : ch}⟫`);
      else mark(`⟪${run} blanks⟫`);
    }
    i += run;
  }
  if (plain) pieces.push({ text: plain });
  return pieces;
}

/**
 * `text` with every hidden character and every combining mark past the second on one base written as
 * an escape (what the daemon's `text::escape` writes): one line, whatever it holds. For exports.
 */
export function escape(text) {
  let out = '';
  let marks = 0;
  for (const ch of String(text ?? '')) {
    if (inTable(STACKING_MARKS, ch.codePointAt(0))) {
      marks++;
      out += marks > MAX_MARKS_PER_BASE ? escapeOf(ch) : ch;
      continue;
    }
    marks = 0;
    out += isHidden(ch) ? escapeOf(ch) : ch;
  }
  return out;
}

/**
 * Prose laid out in an export with lines of its own (what the daemon's `text::indented` writes):
 * each line escaped and after `indent`, an empty line left empty.
 */
export function indented(text, indent) {
  return String(text ?? '').split('\n').map((line) => (line ? indent + escape(line) : '')).join('\n');
}

/** `text` revealed, as one string (what the daemon's `text::reveal` writes). */
export function reveal(text) {
  return revealPieces(text).map((p) => p.text ?? p.mark).join('');
}
