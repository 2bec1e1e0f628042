// Building DOM safely: every node is made with createElement and every text goes in through
// textContent or a text node. Nothing in this app assigns innerHTML, so no string from the agent, a
// client or the daemon is ever parsed as HTML.

/** Attributes h() sets with setAttribute; anything else in props is refused (a bug, loudly). */
const ATTRS = new Set([
  'id', 'type', 'name', 'value', 'for', 'title', 'role', 'tabindex', 'placeholder', 'autocomplete',
  'rows', 'lang', 'datetime', 'open', 'hidden', 'disabled', 'checked', 'selected', 'required',
  'spellcheck', 'enterkeyhint', 'inputmode', 'start', 'colspan', 'scope', 'label', 'accesskey', 'rel',
  'target', 'maxlength', 'autocapitalize', 'minlength', 'min', 'max', 'step',
]);

/**
 * h('button', {class: 'primary', onclick: fn, 'aria-label': 'Send'}, 'Send') → <button>.
 * Children: strings (text nodes), nodes, arrays, null/undefined/false (skipped).
 */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = Array.isArray(value) ? value.filter(Boolean).join(' ') : value;
    else if (key === 'text') el.textContent = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'href') setHref(el, value);
    else if (key.startsWith('aria-') || ATTRS.has(key)) el.setAttribute(key, value === true ? '' : String(value));
    else throw new Error(`h(): unknown property ${key}`);
  }
  append(el, children);
  return el;
}

/** Appends children (strings become text nodes). */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Removes every child of el, then appends children. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** Only http(s) and mailto links, or links relative to this page; anything else is not a link. */
export function safeUrl(url) {
  if (typeof url !== 'string') return null;
  const trimmed = url.trim();
  try {
    const parsed = new URL(trimmed, document.baseURI);
    return ['http:', 'https:', 'mailto:'].includes(parsed.protocol) ? parsed.href : null;
  } catch {
    return null;
  }
}

function setHref(el, value) {
  const url = safeUrl(value);
  if (url) el.setAttribute('href', url);
}

/** Line icons on a 24×24 grid, drawn with the current text colour (one path each). */
const ICONS = {
  back: 'M15 18l-6-6 6-6',
  send: 'M22 2L11 13M22 2l-7 20-4-9-9-4z',
  stop: 'M6 6h12v12H6z',
  shield: 'M12 22s8-4 8-10V5l-8-3-8 3v7c0 6 8 10 8 10z',
  repeat: 'M17 1l4 4-4 4M3 11V9a4 4 0 0 1 4-4h14M7 23l-4-4 4-4M21 13v2a4 4 0 0 1-4 4H3',
  user: 'M20 21v-2a4 4 0 0 0-4-4H8a4 4 0 0 0-4 4v2M12 11a4 4 0 1 0 0-8 4 4 0 0 0 0 8z',
  file: 'M14 2H6a2 2 0 0 0-2 2v16a2 2 0 0 0 2 2h12a2 2 0 0 0 2-2V8zM14 2v6h6',
  folder: 'M22 19a2 2 0 0 1-2 2H4a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2h5l2 3h9a2 2 0 0 1 2 2z',
  terminal: 'M4 17l6-6-6-6M12 19h8',
  alert: 'M12 9v4M12 17h.01M10.3 3.9L1.8 18a2 2 0 0 0 1.7 3h17a2 2 0 0 0 1.7-3L13.7 3.9a2 2 0 0 0-3.4 0z',
  plus: 'M12 5v14M5 12h14',
  sliders: 'M4 21v-7M4 10V3M12 21v-9M12 8V3M20 21v-5M20 12V3M1 14h6M9 8h6M17 16h6',
  image: 'M3 3h18v18H3zM21 15l-5-5L5 21M8.5 10a1.5 1.5 0 1 0 0-3 1.5 1.5 0 0 0 0 3z',
  logo: 'M2 12h5l3-8 4 16 3-8h5',
};

/** An icon as inline SVG, hidden from screen readers (the text beside it says what it means). */
export function icon(name) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'icon');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('aria-hidden', 'true');
  svg.setAttribute('focusable', 'false');
  const path = document.createElementNS(ns, 'path');
  path.setAttribute('d', ICONS[name] || ICONS.alert);
  svg.append(path);
  return svg;
}

/**
 * A path as the session's pages show it: relative to the workspace `cwd` when it lies inside it
 * (a phone has no room for `/home/…/project/` on every line), whole otherwise, so a path outside
 * the workspace stands out on the card that asks to touch it. Only a whole directory prefix counts:
 * `/ws2/x` is not inside `/ws`.
 */
export function shortPath(path, cwd) {
  if (typeof path !== 'string' || typeof cwd !== 'string' || cwd === '') return path;
  const base = cwd.endsWith('/') ? cwd : `${cwd}/`;
  return path.startsWith(base) && path.length > base.length ? path.slice(base.length) : path;
}

/** "12:04:31" in the browser's locale; another day's time with its date. */
export function clock(ms) {
  if (!Number.isFinite(ms)) return '';
  const at = new Date(ms);
  const time = { hour: '2-digit', minute: '2-digit', second: '2-digit' };
  // Another day's time names its day (a past session's notes, a device last seen last week, a
  // request that expires after midnight). Field by field: `dateStyle` mixed with `hour` throws.
  if (at.toDateString() !== new Date().toDateString()) {
    return at.toLocaleString([], { year: 'numeric', month: 'short', day: 'numeric', ...time });
  }
  return at.toLocaleTimeString([], time);
}

/**
 * An <img> showing an SVG document given as text (the daemon's QR codes). As an image, never as
 * part of this page: an SVG in an <img> runs no script and loads nothing (and the CSP allows only
 * `data:` images besides the page's own).
 */
export function svgImage(svg, alt) {
  const img = document.createElement('img');
  img.alt = alt;
  img.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(svg)}`;
  return img;
}
