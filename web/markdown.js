// A small Markdown renderer for agent text that never produces HTML from the text: it splits the
// source into block and inline tokens and builds DOM nodes for them, every character of the source
// ending up in a text node. Raw HTML in the source (`<img onerror=…>`) is therefore shown as the
// characters it is. Links are kept only for http(s) and mailto URLs; images become links (the page's
// Content-Security-Policy would not load a remote image anyway).
//
// Covered: ATX headings, paragraphs (a single newline is a line break, as in chat), fenced code,
// block quotes, ordered and unordered (nested) lists, thematic breaks, pipe tables; inline code,
// strong, emphasis, strikethrough, links, autolinks, backslash escapes.

import { h, safeUrl } from './dom.js';

/** Longest source rendered as Markdown; beyond it the text is shown as it is (a bound on work). */
const MAX_MARKDOWN = 512 * 1024;
/** Deepest nesting of block quotes and lists followed; deeper content is plain text. */
const MAX_DEPTH = 8;

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+(.*))?$/;
const TABLE_RULE = /^ *\|? *:?-+:? *(\| *:?-+:? *)*\|? *$/;

/** Renders `source` into a DocumentFragment. */
export function renderMarkdown(source) {
  const fragment = document.createDocumentFragment();
  if (source.length > MAX_MARKDOWN) {
    fragment.append(h('pre', { class: 'plain' }, source));
    return fragment;
  }
  for (const node of blocks(source.replace(/\r\n?/g, '\n').split('\n'), 0)) fragment.append(node);
  return fragment;
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
    const m = FENCE.exec(line);
    if (fence) {
      if (m && m[1][0] === fence[0] && m[1].length >= fence.length && !m[2]) fence = null;
    } else if (m) {
      fence = m[1];
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
    if (line.trim() === '') {
      i++;
      continue;
    }
    if (depth >= MAX_DEPTH) {
      out.push(h('p', {}, lines.slice(i).join('\n')));
      break;
    }
    let m;
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length) {
        const close = FENCE.exec(lines[i]);
        if (close && close[1][0] === fence[0] && close[1].length >= fence.length && !close[2]) {
          i++;
          break;
        }
        body.push(lines[i]);
        i++;
      }
      const code = h('code', m[2] ? { class: `language-${m[2].replace(/[^\w-]/g, '')}` } : {}, body.join('\n'));
      out.push(h('pre', {}, code));
    } else if ((m = HEADING.exec(line))) {
      out.push(h(`h${Math.min(m[1].length + 2, 6)}`, { class: 'md-h' }, inline(m[2] || '')));
      i++;
    } else if (RULE.test(line)) {
      out.push(h('hr', {}));
      i++;
    } else if (QUOTE.test(line)) {
      const inner = [];
      while (i < lines.length && lines[i].trim() !== '' && (m = QUOTE.exec(lines[i]) || [null, lines[i]])) {
        inner.push(m[1]);
        i++;
      }
      out.push(h('blockquote', {}, blocks(inner, depth + 1)));
    } else if (ITEM.test(line)) {
      i = list(lines, i, depth, out);
    } else if (line.includes('|') && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])) {
      i = table(lines, i, out);
    } else {
      const para = [];
      while (i < lines.length && lines[i].trim() !== '' && (para.length === 0 || !startsBlock(lines[i]))) {
        para.push(lines[i]);
        i++;
      }
      out.push(h('p', {}, inline(para.join('\n'))));
    }
  }
  return out;
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
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

/** Inline tokens of `text` as nodes. */
export function inline(text, depth = 0) {
  const out = [];
  let buf = '';
  const flush = () => {
    if (buf) out.push(document.createTextNode(buf));
    buf = '';
  };
  let i = 0;
  while (i < text.length) {
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
      const run = /^`+/.exec(text.slice(i))[0];
      const close = findRun(text, i + run.length, run);
      if (close >= 0) {
        flush();
        let code = text.slice(i + run.length, close).replace(/\n/g, ' ');
        if (/^ .* $/.test(code)) code = code.slice(1, -1);
        out.push(h('code', {}, code));
        i = close + run.length;
        continue;
      }
      buf += run;
      i += run.length;
      continue;
    }
    if (depth < MAX_DEPTH && (c === '*' || c === '_' || c === '~')) {
      const span = emphasis(text, i, depth);
      if (span) {
        flush();
        out.push(span.node);
        i = span.end;
        continue;
      }
    }
    if (depth < MAX_DEPTH && (c === '[' || (c === '!' && text[i + 1] === '['))) {
      const link = linkAt(text, c === '!' ? i + 1 : i, depth, c === '!');
      if (link) {
        flush();
        out.push(link.node);
        i = link.end;
        continue;
      }
    }
    if (c === '<') {
      const m = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/.exec(text.slice(i));
      if (m) {
        flush();
        out.push(anchor(m[1], [m[1]]));
        i += m[0].length;
        continue;
      }
    }
    if ((c === 'h' || c === 'H') && /^https?:\/\//i.test(text.slice(i, i + 8)) && !/\w/.test(text[i - 1] || '')) {
      const m = /^https?:\/\/[^\s<>()]+/i.exec(text.slice(i));
      let url = m[0].replace(/[.,;:!?'"*_~]+$/, '');
      flush();
      out.push(anchor(url, [url]));
      i += url.length;
      continue;
    }
    buf += c;
    i++;
  }
  flush();
  return out;
}

/** The index of the next run of exactly `run` backticks from `from`, or -1. */
function findRun(text, from, run) {
  let k = text.indexOf(run, from);
  while (k >= 0) {
    const before = text[k - 1] === '`';
    const after = text[k + run.length] === '`';
    if (!before && !after) return k;
    k = text.indexOf(run, k + 1);
  }
  return -1;
}

/** `**strong**`, `*em*`, `_em_`, `__strong__`, `~~del~~` starting at i. */
function emphasis(text, i, depth) {
  const c = text[i];
  const double = text[i + 1] === c;
  if (c === '~' && !double) return null;
  const marker = double ? c + c : c;
  const open = i + marker.length;
  // An opener is followed by a non-space; `_` does not open inside a word (snake_case).
  if (open >= text.length || /\s/.test(text[open])) return null;
  if (c === '_' && /\w/.test(text[i - 1] || '')) return null;
  let k = open;
  while ((k = text.indexOf(marker, k + 1)) >= 0) {
    if (/\s/.test(text[k - 1])) continue;
    if (!double && text[k + 1] === c) {
      k++;
      continue;
    }
    if (c === '_' && /\w/.test(text[k + marker.length] || '')) continue;
    const inner = text.slice(open, k);
    if (inner.includes('\n\n')) return null;
    const tag = c === '~' ? 'del' : double ? 'strong' : 'em';
    return { node: h(tag, {}, inline(inner, depth + 1)), end: k + marker.length };
  }
  return null;
}

/** `[text](url "title")` (or an image, `![alt](src)`, shown as a link) at i. */
function linkAt(text, i, depth, image) {
  let level = 0;
  let k = i;
  for (; k < text.length; k++) {
    if (text[k] === '\\') k++;
    else if (text[k] === '[') level++;
    else if (text[k] === ']' && --level === 0) break;
  }
  if (k >= text.length || text[k + 1] !== '(') return null;
  let parens = 0;
  let e = k + 2;
  for (; e < text.length; e++) {
    if (text[e] === '(') parens++;
    else if (text[e] === ')' && parens-- === 0) break;
    else if (text[e] === '\n') return null;
  }
  if (e >= text.length) return null;
  const target = text.slice(k + 2, e).trim();
  const url = target.replace(/\s+(".*"|'.*')$/, '').replace(/^<(.*)>$/, '$1');
  const label = text.slice(i + 1, k);
  const content = image ? [`[image: ${label || url}]`] : inline(label, depth + 1);
  return { node: anchor(url, content), end: e + 1 };
}

/** A link to url when it is safe, else just its content. */
function anchor(url, content) {
  const safe = safeUrl(url);
  if (!safe) return h('span', {}, content);
  return h('a', { href: safe, rel: 'noopener noreferrer', target: '_blank', title: safe }, content);
}
