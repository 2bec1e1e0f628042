// A small Markdown renderer for agent text that never produces HTML from the text: it splits the
// source into block and inline tokens and builds DOM nodes for them, every character of the source
// ending up in a text node. Raw HTML in the source (`<img onerror=…>`) is therefore shown as the
// characters it is. Links are kept only for http(s) and mailto URLs; images become links (the page's
// Content-Security-Policy would not load a remote image anyway).
//
// Covered: ATX headings, paragraphs (a single newline is a line break, as in chat), fenced code,
// block quotes, ordered and unordered (nested) lists, thematic breaks, pipe tables; inline code,
// strong, emphasis, strikethrough, links, autolinks, backslash escapes.
//
// Linear in its source, with a bound on its work: an agent's message must not freeze the page.
// Every look ahead (the closer of an emphasis, the `]` of a link, the end of a code span) is found
// by a scan that only moves forward, or from matches computed once per text, never by a fresh scan
// from each opener (`**a ` or `![` repeated made that quadratic); no regular expression can
// backtrack over a line; a table has at most 64 columns. The work is counted, and a render that
// would pass `WORK_PER_CHAR` per character of its source stops and shows the source as plain text.

import { h, safeUrl } from './dom.js';

/** Longest source rendered as Markdown; beyond it the text is shown as it is (a bound on work). */
const MAX_MARKDOWN = 512 * 1024;
/** Deepest nesting of block quotes and lists followed; deeper content is plain text. */
const MAX_DEPTH = 8;
/** Work a render may do per character of its source (every pass is linear; this is the backstop). */
const WORK_PER_CHAR = 128;
/** Columns of a table at most; a wider "table" is a paragraph (cells are made for every column of every row). */
const MAX_TABLE_COLUMNS = 64;

const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+(.*))?$/;
const TABLE_RULE = /^ *\|? *:?-+:? *(\| *:?-+:? *)*\|? *$/;
const FENCE_START = /^ {0,3}(`{3,}|~{3,})/;
const HEADING_START = /^ {0,3}(#{1,6})(?=[ \t]|$)/;

/** Thrown when a render has spent its budget. */
const OVER_BUDGET = Symbol('over budget');
let work = 0;
let budget = Infinity;
let lastWork = 0;

/** Counts `n` units of work against the render's budget. */
function spend(n) {
  work += n;
  if (work > budget) throw OVER_BUDGET;
}

/** The work the last `renderMarkdown` did (characters looked at, roughly): what its tests bound. */
export function lastRenderWork() {
  return lastWork;
}

/** Renders `source` into a DocumentFragment. */
export function renderMarkdown(source) {
  const fragment = document.createDocumentFragment();
  if (source.length > MAX_MARKDOWN) {
    fragment.append(h('pre', { class: 'plain' }, source));
    lastWork = 0;
    return fragment;
  }
  work = 0;
  budget = WORK_PER_CHAR * source.length + 4096;
  try {
    for (const node of blocks(source.replace(/\r\n?/g, '\n').split('\n'), 0)) fragment.append(node);
  } catch (e) {
    if (e !== OVER_BUDGET) throw e;
    fragment.replaceChildren(h('pre', { class: 'plain' }, source));
  } finally {
    lastWork = work;
    budget = Infinity;
  }
  return fragment;
}

/** A fence line: its marker and its info string's first word, or null. The info of a backtick fence holds no backtick. */
function fenceOf(line) {
  const m = FENCE_START.exec(line);
  if (!m) return null;
  const info = line.slice(m[0].length);
  if (m[1][0] === '`' && info.includes('`')) return null;
  return { marker: m[1], lang: info.trim().split(/[ \t]/)[0] };
}

/** Whether `line` closes a code block opened by `fence`. */
function closes(line, fence) {
  const f = fenceOf(line);
  return Boolean(f && f.marker[0] === fence[0] && f.marker.length >= fence.length && !f.lang);
}

/** An ATX heading: its level and its text (a closing run of `#` removed), or null. */
function headingOf(line) {
  const m = HEADING_START.exec(line);
  if (!m) return null;
  let text = line.slice(m[0].length).trim();
  let end = text.length;
  while (end > 0 && text[end - 1] === '#') end--;
  if (end === 0) text = '';
  else if (end < text.length && (text[end - 1] === ' ' || text[end - 1] === '\t')) text = text.slice(0, end).trimEnd();
  return { level: m[1].length, text };
}

/** A thematic break: three or more of one of `-*_`, spaces between, at most three spaces before. */
function isRule(line) {
  let k = 0;
  while (k < line.length && line[k] === ' ') k++;
  if (k > 3) return false;
  const c = line[k];
  if (c !== '-' && c !== '*' && c !== '_') return false;
  let count = 0;
  for (; k < line.length; k++) {
    if (line[k] === c) count++;
    else if (line[k] !== ' ' && line[k] !== '\t') return false;
  }
  return count >= 3;
}

/**
 * Where `text` can be cut so that everything before the cut is made of finished blocks: after the
 * last blank line outside a code fence. Streaming text is rendered as (finished blocks, once) +
 * (the tail, again on every chunk). `state` carries the scan between calls (the text only grows).
 */
export function stableCut(text, state) {
  let { pos = 0, fence = null, cut = 0 } = state;
  for (;;) {
    const end = text.indexOf('\n', pos);
    if (end < 0) break;
    const line = text.slice(pos, end);
    const f = fenceOf(line);
    if (fence) {
      if (closes(line, fence)) fence = null;
    } else if (f) {
      fence = f.marker;
    } else if (line.trim() === '') {
      cut = end + 1;
    }
    pos = end + 1;
  }
  Object.assign(state, { pos, fence, cut });
  return cut;
}

function blocks(lines, depth) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    spend(line.length + 1);
    if (line.trim() === '') {
      i++;
      continue;
    }
    if (depth >= MAX_DEPTH) {
      out.push(h('p', {}, lines.slice(i).join('\n')));
      break;
    }
    let m;
    let f;
    if ((f = fenceOf(line))) {
      const body = [];
      i++;
      while (i < lines.length) {
        spend(lines[i].length + 1);
        if (closes(lines[i], f.marker)) {
          i++;
          break;
        }
        body.push(lines[i]);
        i++;
      }
      const code = h('code', f.lang ? { class: `language-${f.lang.replace(/[^\w-]/g, '')}` } : {}, body.join('\n'));
      out.push(h('pre', {}, code));
    } else if ((m = headingOf(line))) {
      out.push(h(`h${Math.min(m.level + 2, 6)}`, { class: 'md-h' }, inline(m.text)));
      i++;
    } else if (isRule(line)) {
      out.push(h('hr', {}));
      i++;
    } else if (QUOTE.test(line)) {
      const inner = [];
      while (i < lines.length && lines[i].trim() !== '' && (m = QUOTE.exec(lines[i]) || [null, lines[i]])) {
        spend(lines[i].length + 1);
        inner.push(m[1]);
        i++;
      }
      out.push(h('blockquote', {}, blocks(inner, depth + 1)));
    } else if (ITEM.test(line)) {
      i = list(lines, i, depth, out);
    } else if (line.includes('|') && i + 1 < lines.length && isTableRule(lines[i + 1]) && cells(line).length <= MAX_TABLE_COLUMNS) {
      i = table(lines, i, out);
    } else {
      const para = [];
      while (i < lines.length && lines[i].trim() !== '' && (para.length === 0 || !startsBlock(lines[i]))) {
        spend(lines[i].length + 1);
        para.push(lines[i]);
        i++;
      }
      out.push(h('p', {}, inline(para.join('\n'))));
    }
  }
  return out;
}

function isTableRule(line) {
  return line.includes('-') && TABLE_RULE.test(line);
}

function startsBlock(line) {
  return Boolean(fenceOf(line) || headingOf(line) || isRule(line) || QUOTE.test(line) || ITEM.test(line));
}

/** A list starting at lines[i]; pushes it to out and returns the index after it. */
function list(lines, i, depth, out) {
  const first = ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const items = [];
  let loose = false;
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || /\d/.test(m[2]) !== ordered) break;
    const indent = m[1].length + m[2].length + 1;
    const body = [m[4] || ''];
    i++;
    let blank = false;
    while (i < lines.length) {
      const line = lines[i];
      spend(line.length + 1);
      if (line.trim() === '') {
        blank = true;
        body.push('');
        i++;
        continue;
      }
      const lead = line.length - line.trimStart().length;
      if (lead >= indent) {
        body.push(line.slice(indent));
      } else if (!blank && !startsBlock(line)) {
        body.push(line.trimStart()); // a lazy continuation of the item's paragraph
      } else {
        break;
      }
      if (blank) loose = true;
      blank = false;
      i++;
    }
    while (body.length && body[body.length - 1] === '') body.pop();
    items.push(body);
  }
  const start = ordered ? parseInt(first[2], 10) : null;
  const el = h(ordered ? 'ol' : 'ul', start !== null && start !== 1 ? { start } : {});
  for (const body of items) {
    const content = blocks(body, depth + 1);
    const li = h('li', {});
    for (const node of content) {
      // A tight list shows its paragraphs without the paragraph spacing.
      if (!loose && node.tagName === 'P') li.append(...node.childNodes);
      else li.append(node);
    }
    el.append(li);
  }
  out.push(el);
  return i;
}

function cells(line) {
  spend(line.length + 1);
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const out = [];
  let cell = '';
  for (let k = 0; k < s.length; k++) {
    if (s[k] === '\\' && s[k + 1] === '|') {
      cell += '|';
      k++;
    } else if (s[k] === '|') {
      out.push(cell.trim());
      cell = '';
    } else {
      cell += s[k];
    }
  }
  out.push(cell.trim());
  return out;
}

function table(lines, i, out) {
  const head = cells(lines[i]);
  const align = cells(lines[i + 1]).map((c) =>
    c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : null,
  );
  i += 2;
  const rows = [];
  while (i < lines.length && lines[i].trim() !== '' && lines[i].includes('|')) {
    rows.push(cells(lines[i]));
    i++;
  }
  spend(head.length * (rows.length + 1));
  const cell = (tag, text, k) => h(tag, align[k] ? { class: `align-${align[k]}` } : {}, inline(text));
  out.push(
    h('div', { class: 'table-wrap' },
      h('table', {},
        h('thead', {}, h('tr', {}, head.map((c, k) => cell('th', c, k)))),
        h('tbody', {}, rows.map((r) => h('tr', {}, head.map((_, k) => cell('td', r[k] || '', k))))),
      ),
    ),
  );
  return i;
}

const PUNCT = /[!-/:-@[-`{-~]/;
const WS = /\s/;
const WORD = /\w/;
const ANGLE_LINK = /<((?:https?:\/\/|mailto:)[^\s<>]+)>/y;
const BARE_LINK = /https?:\/\/[^\s<>()]+/iy;
/** Punctuation that ends a sentence rather than a bare URL. */
const TRAILING = '.,;:!?\'"*_~';

/**
 * What the inline scanner of one text learns ahead, each computed at most once and only moving
 * forward: the closers of each emphasis marker, the `]` of each `[` and the `)` of each `(`, the
 * runs of backticks.
 */
class Lookahead {
  constructor(text) {
    this.text = text;
    this.closers = new Map();
    this.brackets = null;
    this.parens = null;
    this.runs = null;
  }

  /** The first closer of `marker` at or after `from` (see `isCloser`), or -1. */
  closer(marker, from) {
    const cached = this.closers.get(marker);
    if (cached && from >= cached.from && (cached.at < 0 || from <= cached.at)) return cached.at;
    const text = this.text;
    let k = from;
    let at = -1;
    for (;;) {
      const next = text.indexOf(marker, k);
      spend((next < 0 ? text.length : next) - k + 1);
      if (next < 0) break;
      if (isCloser(text, next, marker)) {
        at = next;
        break;
      }
      k = next + 1;
    }
    this.closers.set(marker, { from, at });
    return at;
  }

  /** The `]` matching the `[` at `i` (backslash escapes skipped), or -1. */
  bracket(i) {
    if (!this.brackets) this.brackets = matches(this.text, '[', ']', true, false);
    return this.brackets[i];
  }

  /** The `)` matching the `(` at `i` on the same line, or -1. */
  paren(i) {
    if (!this.parens) this.parens = matches(this.text, '(', ')', false, true);
    return this.parens[i];
  }

  /** The start of the next run of exactly `length` backticks starting at or after `from`, or -1. */
  run(length, from) {
    if (!this.runs) {
      this.runs = new Map();
      const text = this.text;
      spend(text.length);
      for (let k = 0; k < text.length; k++) {
        if (text[k] !== '`') continue;
        let end = k;
        while (end < text.length && text[end] === '`') end++;
        const list = this.runs.get(end - k) || { starts: [], next: 0 };
        list.starts.push(k);
        this.runs.set(end - k, list);
        k = end - 1;
      }
    }
    const list = this.runs.get(length);
    if (!list) return -1;
    while (list.next < list.starts.length && list.starts[list.next] < from) {
      list.next++;
      spend(1);
    }
    return list.next < list.starts.length ? list.starts[list.next] : -1;
  }
}

/** For each `open` in `text`, the index of its matching `close` (-1 if none), in one pass. */
function matches(text, open, close, escapes, lineBound) {
  spend(text.length);
  const match = new Int32Array(text.length).fill(-1);
  const stack = [];
  for (let k = 0; k < text.length; k++) {
    const c = text[k];
    if (escapes && c === '\\') k++;
    else if (c === open) stack.push(k);
    else if (c === close && stack.length) match[stack.pop()] = k;
    else if (lineBound && c === '\n') stack.length = 0;
  }
  return match;
}

/** Whether `marker` closes an emphasis at `k`: no space before it; a single marker not part of a pair; `_` not followed by a word character. */
function isCloser(text, k, marker) {
  const c = marker[0];
  if (k === 0 || WS.test(text[k - 1])) return false;
  if (marker.length === 1 && (text[k + 1] === c || text[k - 1] === c)) return false;
  if (c === '_' && WORD.test(text[k + marker.length] || '')) return false;
  return true;
}

/** Inline tokens of `text` as nodes. */
export function inline(text, depth = 0) {
  const ahead = new Lookahead(text);
  const out = [];
  let buf = '';
  const flush = () => {
    if (buf) out.push(document.createTextNode(buf));
    buf = '';
  };
  let i = 0;
  while (i < text.length) {
    spend(1);
    const c = text[i];
    if (c === '\\' && i + 1 < text.length && PUNCT.test(text[i + 1])) {
      buf += text[i + 1];
      i += 2;
      continue;
    }
    if (c === '\\' && text[i + 1] === '\n') {
      flush();
      out.push(h('br', {}));
      i += 2;
      continue;
    }
    if (c === '\n') {
      flush();
      out.push(h('br', {}));
      i++;
      continue;
    }
    if (c === '`') {
      let end = i;
      while (end < text.length && text[end] === '`') end++;
      const length = end - i;
      spend(length);
      const close = ahead.run(length, end);
      if (close >= 0) {
        flush();
        let code = text.slice(end, close).replace(/\n/g, ' ');
        if (code.length >= 2 && code[0] === ' ' && code[code.length - 1] === ' ') code = code.slice(1, -1);
        out.push(h('code', {}, code));
        i = close + length;
        continue;
      }
      buf += text.slice(i, end);
      i = end;
      continue;
    }
    if (depth < MAX_DEPTH && (c === '*' || c === '_' || c === '~')) {
      const span = emphasis(text, i, depth, ahead);
      if (span) {
        flush();
        out.push(span.node);
        i = span.end;
        continue;
      }
    }
    if (depth < MAX_DEPTH && (c === '[' || (c === '!' && text[i + 1] === '['))) {
      const link = linkAt(text, c === '!' ? i + 1 : i, depth, c === '!', ahead);
      if (link) {
        flush();
        out.push(link.node);
        i = link.end;
        continue;
      }
    }
    if (c === '<') {
      ANGLE_LINK.lastIndex = i;
      const m = ANGLE_LINK.exec(text);
      if (m) {
        spend(m[0].length);
        flush();
        out.push(anchor(m[1], [m[1]]));
        i += m[0].length;
        continue;
      }
    }
    if ((c === 'h' || c === 'H') && !WORD.test(text[i - 1] || '')) {
      BARE_LINK.lastIndex = i;
      const m = BARE_LINK.exec(text);
      if (m) {
        spend(m[0].length);
        let end = m[0].length;
        while (end > 0 && TRAILING.includes(m[0][end - 1])) end--;
        const url = m[0].slice(0, end);
        flush();
        out.push(anchor(url, [url]));
        i += url.length;
        continue;
      }
    }
    buf += c;
    i++;
  }
  flush();
  return out;
}

/** `**strong**`, `*em*`, `_em_`, `__strong__`, `~~del~~` starting at i. */
function emphasis(text, i, depth, ahead) {
  const c = text[i];
  const double = text[i + 1] === c;
  if (c === '~' && !double) return null;
  const marker = double ? c + c : c;
  const open = i + marker.length;
  // An opener is followed by a non-space; `_` does not open inside a word (snake_case).
  if (open >= text.length || WS.test(text[open])) return null;
  if (c === '_' && WORD.test(text[i - 1] || '')) return null;
  const k = ahead.closer(marker, open + 1);
  if (k < 0) return null;
  const tag = c === '~' ? 'del' : double ? 'strong' : 'em';
  return { node: h(tag, {}, inline(text.slice(open, k), depth + 1)), end: k + marker.length };
}

/** `[text](url "title")` (or an image, `![alt](src)`, shown as a link) at i. */
function linkAt(text, i, depth, image, ahead) {
  const k = ahead.bracket(i);
  if (k < 0 || text[k + 1] !== '(') return null;
  const e = ahead.paren(k + 1);
  if (e < 0) return null;
  spend(e - k);
  const url = linkUrl(text.slice(k + 2, e).trim());
  const label = text.slice(i + 1, k);
  const content = image ? [`[image: ${label || url}]`] : inline(label, depth + 1);
  return { node: anchor(url, content), end: e + 1 };
}

/** The URL of a link's `(target "title")`: the title (from the first blank followed by the quote the target ends with) and `<…>` removed. */
function linkUrl(target) {
  let url = target;
  const q = target[target.length - 1];
  if (q === '"' || q === "'") {
    for (let j = 0; j < target.length - 1; j++) {
      if (!WS.test(target[j])) continue;
      let k = j;
      while (k < target.length && WS.test(target[k])) k++;
      if (target[k] === q && k < target.length - 1) {
        url = target.slice(0, j);
        break;
      }
      j = k - 1;
    }
  }
  if (url.length >= 2 && url[0] === '<' && url[url.length - 1] === '>') url = url.slice(1, -1);
  return url;
}

/** A link to url when it is safe, else just its content. */
function anchor(url, content) {
  const safe = safeUrl(url);
  if (!safe) return h('span', {}, content);
  return h('a', { href: safe, rel: 'noopener noreferrer', target: '_blank', title: safe }, content);
}
