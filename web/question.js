// The agent's question (`docs/protocol.md#19-questions`) as a form on its card: a field per
// question — text, a number, yes/no, one choice or several, with the agent's "Other" — or, for a
// URL the agent wants the person to open, the link with its host shown first. The answers go in
// the vote that submits it; the daemon checks and converts them (and says which field it refuses),
// so this form only collects what the person entered.

import { h, safeUrl } from './dom.js';
import { revealPieces } from './reveal.js';

let nextForm = 0;

/** Text the agent chose, as nodes that hide nothing (`reveal.js`). */
function shown(text) {
  return revealPieces(String(text ?? '')).map((p) => (p.mark !== undefined ? h('span', { class: 'reveal' }, p.mark) : p.text));
}

/**
 * The form of `question` (`permission_request.question`): `{ el, answers() }`, `answers()` giving
 * the vote's `answers` (by field key; an empty text is left out, as it is no answer).
 */
export function questionForm(question) {
  const uid = `q${nextForm++}`;
  if (question.form === 'url') return linkForm(question);
  const fields = (Array.isArray(question.fields) ? question.fields : []).map((f, i) => field(f, `${uid}-${i}`));
  const el = h('div', { class: 'question', dataset: { form: String(question.form) } },
    question.message ? h('p', { class: 'question-message' }, shown(question.message)) : null,
    fields.map((f) => f.el));
  return {
    el,
    answers() {
      const out = {};
      for (const f of fields) {
        const v = f.value();
        if (v !== undefined) out[f.key] = v;
      }
      return out;
    },
  };
}

/** A URL to open: its host before it (what a person checks), opened in a new tab, never by the daemon. */
function linkForm(question) {
  const href = safeUrl(question.url);
  const el = h('div', { class: 'question', dataset: { form: 'url' } },
    question.message ? h('p', { class: 'question-message' }, shown(question.message)) : null,
    h('p', { class: 'question-host' }, 'Opens a page on ', h('strong', {}, shown(question.host))),
    href && /^https?:/i.test(href)
      ? h('a', { class: 'question-link', href, target: '_blank', rel: 'noopener noreferrer' }, shown(question.url))
      : h('p', { class: 'question-link' }, shown(question.url)));
  return { el, answers: () => ({}) };
}

/** One field: its label, its question, its input; `value()` its answer or undefined. */
function field(f, id) {
  const key = String(f.key);
  const label = h('label', { for: id, class: 'question-title' }, shown(f.title || f.text || key), f.required ? ' *' : null);
  const text = f.text && f.text !== f.title ? h('p', { class: 'question-text' }, shown(f.text)) : null;
  let input;
  let value;
  switch (f.type) {
    case 'choice':
      return choices(f, id, key, text);
    case 'boolean': {
      input = h('input', { id, type: 'checkbox', name: key, checked: f.default === true });
      value = () => input.checked;
      return { key, value, el: h('div', { class: 'question-field', dataset: { key } }, h('label', { class: 'question-check' }, input, ' ', shown(f.title || key)), text) };
    }
    case 'integer':
    case 'number':
      input = h('input', {
        id, name: key, type: 'text', inputmode: f.type === 'integer' ? 'numeric' : 'decimal',
        placeholder: range(f), required: f.required, autocomplete: 'off',
        value: f.default !== undefined ? String(f.default) : undefined,
      });
      break;
    default:
      input = h('input', {
        id, name: key, type: f.sensitive ? 'password' : 'text', required: f.required, autocomplete: 'off',
        maxlength: f.maxLength, minlength: f.minLength,
        value: typeof f.default === 'string' && !f.sensitive ? f.default : undefined,
      });
  }
  value = () => (input.value.trim() === '' ? undefined : input.value);
  return { key, value, el: h('div', { class: 'question-field', dataset: { key } }, label, text, input) };
}

/** "1 to 9", "at least 1": a number field's bounds as its placeholder. */
function range(f) {
  if (f.minimum !== undefined && f.maximum !== undefined) return `${f.minimum} to ${f.maximum}`;
  if (f.minimum !== undefined) return `at least ${f.minimum}`;
  if (f.maximum !== undefined) return `at most ${f.maximum}`;
  return f.type === 'integer' ? 'a whole number' : 'a number';
}

/** One choice (radio buttons) or several (checkboxes), each with its description; "Other" when the field takes a text of one's own. */
function choices(f, id, key, text) {
  const many = f.multiple === true;
  const list = Array.isArray(f.choices) ? f.choices : [];
  const boxes = list.map((c, i) => {
    const box = h('input', { id: `${id}-${i}`, type: many ? 'checkbox' : 'radio', name: id, value: String(c.value) });
    return {
      c, box,
      el: h('label', { class: 'question-choice', for: `${id}-${i}` }, box, ' ', h('span', {}, shown(c.label)),
        c.description ? h('small', {}, ' — ', shown(c.description)) : null),
    };
  });
  const other = f.other
    ? h('input', { id: `${id}-other`, type: 'text', name: `${id}-other`, placeholder: 'Other (your own answer)', autocomplete: 'off', 'aria-label': 'Other' })
    : null;
  const value = () => {
    const picked = boxes.filter((b) => b.box.checked).map((b) => b.c.value);
    const own = other && other.value.trim() !== '' ? other.value : null;
    if (many) {
      const all = own ? [...picked, own] : picked;
      return all.length ? all : undefined;
    }
    return own ?? picked[0];
  };
  const legend = h('legend', { class: 'question-title' }, shown(f.title || f.text || key), f.required ? ' *' : null);
  return {
    key, value,
    el: h('fieldset', { class: 'question-field', dataset: { key } }, legend, text, boxes.map((b) => b.el), other),
  };
}
