// ACP `diff` tool-call content ({path, oldText, newText}) as a unified diff: Myers' O(ND) line diff,
// hunks with three lines of context, rendered as text rows.

import { h, shortPath } from './dom.js';

/** Context lines around each change, as `diff -u`. */
const CONTEXT = 3;
/** Edit distance beyond which the diff is not searched for: the change is shown as a replacement. */
const MAX_EDITS = 2000;

/** The edit script from a to b (arrays of lines): [{op: ' ' | '-' | '+', line}]. */
export function diffLines(a, b) {
  const n = a.length;
  const m = b.length;
  const max = Math.min(n + m, MAX_EDITS);
  const offset = max + 1;
  const v = new Int32Array(2 * max + 3);
  const trace = [];
  let found = -1;
  for (let d = 0; d <= max && found < 0; d++) {
    trace.push(v.slice());
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && v[offset + k - 1] < v[offset + k + 1]) ? v[offset + k + 1] : v[offset + k - 1] + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      v[offset + k] = x;
      if (x >= n && y >= m) {
        found = d;
        break;
      }
    }
  }
  if (found < 0) {
    return [...a.map((line) => ({ op: '-', line })), ...b.map((line) => ({ op: '+', line }))];
  }
  // Walk the trace back from (n, m) to (0, 0): each step is a run of equal lines, then one edit.
  const script = [];
  let x = n;
  let y = m;
  const same = () => {
    x--;
    y--;
    script.push({ op: ' ', line: a[x] });
  };
  for (let d = found; d > 0; d--) {
    const vd = trace[d];
    const k = x - y;
    const prevK = k === -d || (k !== d && vd[offset + k - 1] < vd[offset + k + 1]) ? k + 1 : k - 1;
    const prevX = vd[offset + prevK];
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) same();
    if (x === prevX) {
      y--;
      script.push({ op: '+', line: b[y] });
    } else {
      x--;
      script.push({ op: '-', line: a[x] });
    }
  }
  while (x > 0 && y > 0) same();
  return script.reverse();
}

function split(text) {
  if (text === null || text === undefined || text === '') return [];
  const lines = String(text).split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** The unified diff of oldText → newText as hunks: [{header, rows: [{op, line}]}]. */
export function unifiedDiff(oldText, newText) {
  const script = diffLines(split(oldText), split(newText));
  // Each row's line numbers: of the line it shows, or of the next one on a side it does not touch.
  let oldNo = 1;
  let newNo = 1;
  const rows = script.map((row) => {
    const numbered = { ...row, oldNo, newNo };
    if (row.op !== '+') oldNo++;
    if (row.op !== '-') newNo++;
    return numbered;
  });
  const ranges = [];
  rows.forEach((row, i) => {
    if (row.op === ' ') return;
    const lo = Math.max(0, i - CONTEXT);
    const hi = Math.min(rows.length - 1, i + CONTEXT);
    const last = ranges[ranges.length - 1];
    if (last && lo <= last.hi + 1) last.hi = hi;
    else ranges.push({ lo, hi });
  });
  return ranges.map(({ lo, hi }) => {
    const slice = rows.slice(lo, hi + 1);
    const oldCount = slice.filter((r) => r.op !== '+').length;
    const newCount = slice.filter((r) => r.op !== '-').length;
    return {
      header: `@@ -${range(slice[0].oldNo, oldCount)} +${range(slice[0].newNo, newCount)} @@`,
      rows: slice.map(({ op, line }) => ({ op, line })),
    };
  });
}

function range(start, count) {
  if (count === 0) return `${start - 1},0`;
  return count === 1 ? `${start}` : `${start},${count}`;
}

/**
 * A diff view: the path (relative to the workspace `cwd` when inside it; the whole path on hover),
 * then each hunk's rows with +/- marks (and as text, for screen readers).
 */
export function renderDiff({ path, oldText, newText }, cwd) {
  const shown = shortPath(path, cwd) || '';
  const title = oldText === null || oldText === undefined ? `new file ${shown}` : shown;
  return renderHunks(path, title, unifiedDiff(oldText, newText));
}

/**
 * The daemon's hunks (`{oldStart, oldLines, newStart, newLines, lines}`, each line starting with
 * ` `, `+` or `-`: docs/protocol.md §18.4) as this module's, for `renderHunks`.
 */
export function daemonHunks(hunks) {
  return (Array.isArray(hunks) ? hunks : []).map((hk) => {
    // Each row's line number: in the new file for an added or unchanged line, in the old for a removed one.
    let oldNo = Number(hk.oldStart) || 0;
    let newNo = Number(hk.newStart) || 0;
    return {
      header: `@@ -${hk.oldStart},${hk.oldLines} +${hk.newStart},${hk.newLines} @@`,
      rows: (Array.isArray(hk.lines) ? hk.lines : []).map((l) => {
        const text = String(l);
        const op = text[0] === '+' || text[0] === '-' ? text[0] : ' ';
        const no = op === '-' ? oldNo++ : newNo++;
        if (op === ' ') oldNo++;
        return { op, line: text.slice(1), no };
      }),
    };
  });
}

/** A diff view of `hunks` (as `unifiedDiff` gives them) under the caption `title`. */
export function renderHunks(path, title, hunks) {
  const rows = [];
  for (const hunk of hunks) {
    rows.push(h('span', { class: 'diff-hunk' }, hunk.header, '\n'));
    for (const row of hunk.rows) {
      const cls = row.op === '+' ? 'diff-add' : row.op === '-' ? 'diff-del' : 'diff-ctx';
      // A line number, when the hunk has them, in a gutter a screen reader skips.
      const gutter = row.no === undefined ? null : h('span', { class: 'ln', 'aria-hidden': 'true' }, String(row.no));
      rows.push(h('span', { class: cls }, gutter, row.op + row.line, '\n'));
    }
  }
  if (hunks.length === 0) rows.push(h('span', { class: 'diff-ctx' }, '(no change)'));
  return h('figure', { class: 'diff' },
    h('figcaption', { title: path || '' }, title.trim()),
    h('pre', { 'aria-label': `Diff of ${path || 'a file'}` }, rows),
  );
}
