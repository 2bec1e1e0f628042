#!/usr/bin/env node
// The harness's self-test: starts provider.mjs on a throwaway self-signed certificate and drives it
// end to end over HTTPS as the daemon and a browser will, with Node's own https and crypto only.
//
//   node tests/oidc/check.mjs
//
// Installs oidc-provider first when needed (install.sh). Every request has a deadline
// (REQUEST_MS), the provider's start another (READY_MS), and the whole run one more (TOTAL_MS);
// exit status 0 only if every step passed. Needs openssl for the certificate.

import { execFileSync, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
// One HTTP request on loopback; generous for a loaded 2-core machine, where each takes milliseconds.
const REQUEST_MS = 5_000;
// Node starting and loading oidc-provider, measured at under a second; slack for a loaded machine.
const READY_MS = 15_000;
// The provider exiting after stop, SIGTERM or the end of its stdin.
const EXIT_MS = 5_000;
// Everything after the install: the run takes a few seconds.
const TOTAL_MS = 55_000;
const CALLBACK = 'http://127.0.0.1:9/callback'; // never requested: the flow stops at the redirect
const LOGGED_OUT = 'http://127.0.0.1:9/logged-out';
const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';

// ---------------------------------------------------------------- setup

try {
  execFileSync('bash', [path.join(HERE, 'install.sh')], { stdio: ['ignore', 'inherit', 'inherit'] });
} catch {
  process.exit(1); // install.sh said why
}
try {
  execFileSync('openssl', ['version'], { stdio: 'ignore' });
} catch {
  console.error('oidc check: ERROR: openssl is needed to make the throwaway certificate (apt-get install openssl)');
  process.exit(1);
}

const started = Date.now();
const children = new Set();
const deadline = setTimeout(() => {
  console.error(`oidc check: ERROR: the self-test did not finish within ${TOTAL_MS / 1000} s`);
  finish(1);
}, TOTAL_MS);
deadline.unref();

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mediatord-oidc-check-'));
execFileSync('openssl', [
  'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1',
  '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost',
  '-keyout', path.join(dir, 'key.pem'), '-out', path.join(dir, 'cert.pem'),
], { stdio: 'ignore' });
const CA = fs.readFileSync(path.join(dir, 'cert.pem'));

const TTL = { access_token: 30, id_token: 45, refresh_token: 120 };
const ACCOUNTS = [
  { id: 'ada', email: 'ada@example.test', name: 'Ada Lovelace', groups: ['admins', 'engineers'] },
  { id: 'mallory', email: 'mallory@elsewhere.test', name: 'Mallory', groups: [] },
];
const WEB = { client_id: 'web', client_secret: crypto.randomBytes(16).toString('hex') };
const baseConfig = {
  cert: path.join(dir, 'cert.pem'),
  key: path.join(dir, 'key.pem'),
  host: '127.0.0.1',
  port: 0,
  ttl: TTL,
  clients: [
    {
      ...WEB,
      client_name: 'mediatord web app',
      redirect_uris: [CALLBACK],
      post_logout_redirect_uris: [LOGGED_OUT],
      grant_types: ['authorization_code', 'refresh_token'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
    { client_id: 'cli', grant_types: [DEVICE_GRANT, 'refresh_token'], token_endpoint_auth_method: 'none' },
  ],
  accounts: ACCOUNTS,
};

// ---------------------------------------------------------------- steps and results

let passed = 0;
const lines = [];
let current; // the provider whose stderr a failure shows

async function step(name, fn) {
  try {
    const detail = await fn();
    passed += 1;
    console.log(`ok    ${name}${detail ? `: ${detail}` : ''}`);
  } catch (err) {
    console.log(`FAIL  ${name}: ${err.message}`);
    if (current) console.log(`--- provider stderr ---\n${current.stderr().trimEnd()}\n---`);
    console.log(`oidc: ${passed} passed, 1 failed`);
    finish(1);
  }
}

function finish(code) {
  for (const child of children) child.kill('SIGKILL');
  fs.rmSync(dir, { recursive: true, force: true });
  process.exit(code);
}

function expect(cond, msg) {
  if (!cond) throw new Error(msg);
}
function equal(actual, wanted, what) {
  if (JSON.stringify(actual) !== JSON.stringify(wanted)) {
    throw new Error(`${what}: got ${JSON.stringify(actual)}, wanted ${JSON.stringify(wanted)}`);
  }
}

// ---------------------------------------------------------------- the provider process

function startProvider(config, name) {
  const file = path.join(dir, `${name}.json`);
  fs.writeFileSync(file, JSON.stringify(config));
  const child = spawn(process.execPath, [path.join(HERE, 'provider.mjs'), file], { stdio: ['pipe', 'pipe', 'pipe'] });
  children.add(child);
  let err = '';
  let out = '';
  child.stderr.on('data', (d) => { err += d; });
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    });
  });
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ready line within ${READY_MS / 1000} s; stderr: ${err}`)), READY_MS);
    child.stdout.on('data', (d) => {
      out += d;
      const nl = out.indexOf('\n');
      if (nl >= 0) {
        clearTimeout(timer);
        try {
          resolve(JSON.parse(out.slice(0, nl)));
        } catch (e) {
          reject(new Error(`the ready line is not JSON: ${out.slice(0, nl)}`));
        }
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`the provider exited (${code ?? signal}) before its ready line; stderr: ${err}`));
    });
  });
  return {
    child, ready, exited, stderr: () => err, stdout: () => out,
  };
}

function within(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: nothing within ${ms / 1000} s`)), ms); }),
  ]).finally(() => clearTimeout(timer));
}

// ---------------------------------------------------------------- HTTP, cookies, forms

// A browser's cookie store, enough for one host: name and path (RFC 6265 path-match), expiry.
class Jar {
  #cookies = new Map(); // `${path}\t${name}` -> { name, value, path }

  store(url, headers) {
    for (const line of headers['set-cookie'] ?? []) {
      const [pair, ...attrs] = line.split(';').map((s) => s.trim());
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq);
      const value = pair.slice(eq + 1);
      let cpath = url.pathname.slice(0, url.pathname.lastIndexOf('/')) || '/';
      let gone = false;
      for (const attr of attrs) {
        const [k, v = ''] = attr.split('=');
        if (k.toLowerCase() === 'path' && v.startsWith('/')) cpath = v;
        if (k.toLowerCase() === 'max-age' && Number(v) <= 0) gone = true;
        if (k.toLowerCase() === 'expires' && Date.parse(v) <= Date.now()) gone = true;
      }
      const key = `${cpath}\t${name}`;
      if (gone) this.#cookies.delete(key);
      else this.#cookies.set(key, { name, value, path: cpath });
    }
  }

  header(url) {
    const p = url.pathname;
    return [...this.#cookies.values()]
      .filter((c) => p === c.path || (p.startsWith(c.path) && (c.path.endsWith('/') || p[c.path.length] === '/')))
      .sort((a, b) => b.path.length - a.path.length)
      .map((c) => `${c.name}=${c.value}`)
      .join('; ');
  }
}

function request(target, {
  method = 'GET', headers = {}, form, jar, basic,
} = {}) {
  const url = new URL(target);
  const h = { ...headers };
  let payload;
  if (form) {
    payload = new URLSearchParams(form).toString();
    h['content-type'] = 'application/x-www-form-urlencoded';
    h['content-length'] = Buffer.byteLength(payload);
  }
  if (basic) {
    h.authorization = `Basic ${Buffer.from(`${encodeURIComponent(basic[0])}:${encodeURIComponent(basic[1])}`).toString('base64')}`;
  }
  if (jar) {
    const cookie = jar.header(url);
    if (cookie) h.cookie = cookie;
  }
  const lib = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = lib.request(url, {
      method, headers: h, ca: CA, agent: false, signal: AbortSignal.timeout(REQUEST_MS),
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        if (jar) jar.store(url, res.headers);
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({
          status: res.statusCode,
          headers: res.headers,
          text,
          url,
          json() {
            try {
              return JSON.parse(text);
            } catch {
              throw new Error(`${method} ${url.pathname} answered ${res.statusCode}, not JSON: ${text.slice(0, 200)}`);
            }
          },
        });
      });
      res.on('error', reject);
    });
    req.on('error', (e) => reject(new Error(`${method} ${url.href}: ${e.message}`)));
    req.end(payload);
  });
}

// Follows redirects as a browser does (a 303 after a POST becomes a GET) until a page is answered or
// the redirect leaves for `stop` (the client's redirect URI), which is not requested.
async function follow(res, jar, stop = 'http://127.0.0.1:9/') {
  for (let hops = 0; hops < 12; hops += 1) {
    if (res.status < 300 || res.status > 399) return { page: res };
    const next = new URL(res.headers.location, res.url);
    if (next.href.startsWith(stop)) return { redirect: next };
    res = await request(next.href, { jar });
  }
  throw new Error('more than 12 redirects');
}

const unescape = (s) => s.replace(/&(amp|lt|gt|quot|#39);/g, (_, e) => ({ amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'" }[e]));
// The form with this id: its action (absolute) and its hidden inputs.
function formOf(page, id) {
  const m = new RegExp(`<form[^>]*id="${id.replace('.', '\\.')}"[^>]*>([\\s\\S]*?)</form>`).exec(page.text);
  expect(m, `no form #${id} on ${page.url.pathname} (status ${page.status}): ${page.text.slice(0, 300)}`);
  const action = /action="([^"]*)"/.exec(m[0])[1];
  const hidden = {};
  for (const input of m[1].matchAll(/<input[^>]*type="hidden"[^>]*>/g)) {
    hidden[/name="([^"]*)"/.exec(input[0])[1]] = unescape(/value="([^"]*)"/.exec(input[0])[1]);
  }
  return { action: new URL(unescape(action), page.url).href, hidden };
}
const textOf = (page, id) => {
  const m = new RegExp(`id="${id}"[^>]*>([^<]*)<`).exec(page.text);
  return m && unescape(m[1]);
};

// ---------------------------------------------------------------- OIDC helpers

const b64url = (buf) => Buffer.from(buf).toString('base64url');
// 32 bytes: 43 characters, the shortest code_verifier RFC 7636 allows.
const random = () => b64url(crypto.randomBytes(32));

function authorizeUrl(disc, params) {
  const u = new URL(disc.authorization_endpoint);
  for (const [k, v] of Object.entries(params)) if (v !== undefined) u.searchParams.set(k, v);
  return u.href;
}

// An authorization request for `client` with PKCE (S256) and a nonce. `login` signs in through the
// form when the provider asks; without it, the session must already be there.
async function authorize(disc, jar, { clientId = 'web', scope = 'openid email profile groups', login, redirectUri = CALLBACK } = {}) {
  const verifier = random();
  const state = random();
  const nonce = random();
  const url = authorizeUrl(disc, {
    client_id: clientId,
    response_type: 'code',
    scope,
    redirect_uri: redirectUri,
    state,
    nonce,
    code_challenge: b64url(crypto.createHash('sha256').update(verifier).digest()),
    code_challenge_method: 'S256',
  });
  let r = await follow(await request(url, { jar }), jar, redirectUri);
  let signedIn = false;
  if (r.page) {
    expect(login, `the provider asked for a sign-in (${r.page.url.pathname}, ${r.page.status}) where a session was expected`);
    const f = formOf(r.page, 'login-form');
    r = await follow(await request(f.action, { method: 'POST', form: { login }, jar }), jar, redirectUri);
    if (!r.redirect) throw new Error(`after signing in as ${login}: ${r.page.status} ${r.page.url.pathname} ${textOf(r.page, 'error') ?? ''}`);
    signedIn = true;
  }
  const q = r.redirect.searchParams;
  expect(!q.get('error'), `the authorization answered ${q.get('error')}: ${q.get('error_description')}`);
  equal(q.get('state'), state, 'state in the redirect');
  equal(q.get('iss'), disc.issuer, 'iss in the redirect (RFC 9207)');
  expect(q.get('code'), 'no code in the redirect');
  return {
    code: q.get('code'), verifier, nonce, signedIn,
  };
}

async function token(disc, form, basic) {
  const res = await request(disc.token_endpoint, { method: 'POST', form, basic });
  return { status: res.status, body: res.json() };
}
const webAuth = [WEB.client_id, WEB.client_secret];

async function tokenOk(disc, form, basic) {
  const { status, body } = await token(disc, form, basic);
  expect(status === 200, `token endpoint (${form.grant_type}) answered ${status}: ${JSON.stringify(body)}`);
  return body;
}

function decode(part) {
  return JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
}

// Checks an ID token as a relying party must: RS256, a key of the JWKS by kid, the signature, iss,
// aud, nonce (when one was sent), exp; returns its payload.
function verifyIdToken(idToken, { jwks, issuer, audience, nonce }) {
  const [h, p, s] = idToken.split('.');
  const header = decode(h);
  const payload = decode(p);
  equal(header.alg, 'RS256', 'ID token alg');
  const jwk = jwks.keys.find((k) => k.kid === header.kid);
  expect(jwk, `the ID token's kid ${header.kid} is not in the JWKS (${jwks.keys.map((k) => k.kid).join(', ')})`);
  const key = crypto.createPublicKey({ key: jwk, format: 'jwk' });
  expect(crypto.verify('sha256', Buffer.from(`${h}.${p}`), key, Buffer.from(s, 'base64url')), 'the ID token signature does not verify against the JWKS key');
  equal(payload.iss, issuer, 'ID token iss');
  expect(payload.aud === audience || (Array.isArray(payload.aud) && payload.aud.includes(audience)), `ID token aud ${JSON.stringify(payload.aud)} is not ${audience}`);
  if (nonce !== undefined) equal(payload.nonce, nonce, 'ID token nonce');
  const now = Math.floor(Date.now() / 1000);
  expect(payload.exp > now, `ID token exp ${payload.exp} is not after now (${now})`);
  equal(payload.exp - payload.iat, TTL.id_token, 'ID token lifetime (exp - iat)');
  return { header, payload };
}

async function control(ctl, method, what) {
  const res = await request(`${ctl}${what}`, { method });
  return { status: res.status, body: res.json() };
}

// ---------------------------------------------------------------- the run

const main = startProvider(baseConfig, 'main');
current = main;
let ready;
let disc;
let jwks;
const webJar = new Jar();
const deviceJar = new Jar(); // the browser that confirms the device's code: ada's session stays in it
let web; // the web client's latest tokens
let cli; // the device's latest tokens

await step('ready line', async () => {
  ready = await main.ready;
  expect(/^https:\/\/127\.0\.0\.1:\d+$/.test(ready.issuer), `issuer ${ready.issuer}`);
  expect(/^http:\/\/127\.0\.0\.1:\d+$/.test(ready.control), `control ${ready.control}`);
  equal(Object.keys(ready).sort(), ['control', 'issuer'], 'the ready line\'s keys');
  return `issuer ${ready.issuer}, control ${ready.control}`;
});

await step('discovery', async () => {
  const res = await request(`${ready.issuer}/.well-known/openid-configuration`);
  equal(res.status, 200, 'discovery status');
  disc = res.json();
  equal(disc.issuer, ready.issuer, 'discovery issuer');
  for (const k of ['authorization_endpoint', 'token_endpoint', 'userinfo_endpoint', 'jwks_uri', 'device_authorization_endpoint', 'revocation_endpoint', 'end_session_endpoint']) {
    expect(disc[k]?.startsWith(`${ready.issuer}/`), `discovery ${k}: ${disc[k]}`);
  }
  equal(disc.code_challenge_methods_supported, ['S256'], 'code_challenge_methods_supported');
  expect(disc.id_token_signing_alg_values_supported.includes('RS256'), 'RS256 among id_token_signing_alg_values_supported');
  for (const g of ['authorization_code', 'refresh_token', DEVICE_GRANT]) expect(disc.grant_types_supported.includes(g), `grant ${g} not supported`);
  for (const s of ['openid', 'email', 'profile', 'groups']) expect(disc.scopes_supported.includes(s), `scope ${s} not supported`);
  for (const c of ['email', 'email_verified', 'name', 'groups']) expect(disc.claims_supported.includes(c), `claim ${c} not supported`);
  const k = await request(disc.jwks_uri);
  jwks = k.json();
  expect(jwks.keys.length === 1 && jwks.keys[0].kty === 'RSA' && jwks.keys[0].kid, `JWKS: ${k.text}`);
  expect(!('d' in jwks.keys[0]), 'the JWKS publishes a private key');
  return `${Object.keys(disc).length} fields, JWKS: one RSA key, kid ${jwks.keys[0].kid}`;
});

await step('PKCE is required', async () => {
  const url = authorizeUrl(disc, {
    client_id: 'web', response_type: 'code', scope: 'openid', redirect_uri: CALLBACK, state: 's',
  });
  const jar = new Jar();
  const r = await follow(await request(url, { jar }), jar);
  expect(r.redirect, `no redirect to the client: ${r.page?.status}`);
  equal(r.redirect.searchParams.get('error'), 'invalid_request', 'error without code_challenge');
  return `without code_challenge: invalid_request (${r.redirect.searchParams.get('error_description')})`;
});

let first;
await step('authorization code + PKCE through the login form', async () => {
  first = await authorize(disc, webJar, { login: 'ada' });
  expect(first.signedIn, 'the login form was not shown');
  web = await tokenOk(disc, {
    grant_type: 'authorization_code', code: first.code, redirect_uri: CALLBACK, code_verifier: first.verifier,
  }, webAuth);
  equal(web.token_type, 'Bearer', 'token_type');
  equal(web.expires_in, TTL.access_token, 'expires_in');
  expect(web.access_token && web.refresh_token && web.id_token, `tokens missing: ${Object.keys(web)}`);
  equal(web.scope.split(' ').sort(), ['email', 'groups', 'openid', 'profile'], 'granted scope');
  return `access, refresh and ID token; scope "${web.scope}"`;
});

await step('ID token (signature against the JWKS, iss, aud, nonce, exp, claims)', async () => {
  const { header, payload } = verifyIdToken(web.id_token, {
    jwks, issuer: disc.issuer, audience: 'web', nonce: first.nonce,
  });
  equal(payload.sub, 'ada', 'sub');
  equal(payload.email, 'ada@example.test', 'email');
  equal(payload.email_verified, true, 'email_verified');
  equal(payload.name, 'Ada Lovelace', 'name');
  equal(payload.groups, ['admins', 'engineers'], 'groups');
  return `${header.alg} kid ${header.kid}; sub ${payload.sub}, email ${payload.email}, groups ${payload.groups.join(',')}, exp in ${payload.exp - payload.iat} s`;
});

await step('userinfo', async () => {
  const res = await request(disc.userinfo_endpoint, { headers: { authorization: `Bearer ${web.access_token}` } });
  equal(res.status, 200, 'userinfo status');
  const u = res.json();
  equal([u.sub, u.email, u.name, u.groups], ['ada', 'ada@example.test', 'Ada Lovelace', ['admins', 'engineers']], 'userinfo claims');
  return `sub ${u.sub}, email ${u.email}, groups ${u.groups.join(',')}`;
});

await step('the session signs in again without the form; a wrong code_verifier is refused', async () => {
  const again = await authorize(disc, webJar);
  expect(!again.signedIn, 'the form was shown again');
  const { status, body } = await token(disc, {
    grant_type: 'authorization_code', code: again.code, redirect_uri: CALLBACK, code_verifier: random(),
  }, webAuth);
  equal([status, body.error], [400, 'invalid_grant'], 'a wrong code_verifier');
  return `wrong verifier: ${status} ${body.error}`;
});

await step('device authorization grant (RFC 8628) through the verification form', async () => {
  const res = await request(disc.device_authorization_endpoint, { method: 'POST', form: { client_id: 'cli', scope: 'openid email groups' } });
  equal(res.status, 200, `device authorization status (${res.text})`);
  const da = res.json();
  expect(da.device_code && /^[A-Z]{4}-[A-Z]{4}$/.test(da.user_code), `device authorization: ${res.text}`);
  equal(da.verification_uri, `${disc.issuer}/device`, 'verification_uri');
  equal(da.interval, 1, 'interval');
  const poll = { grant_type: DEVICE_GRANT, device_code: da.device_code, client_id: 'cli' };
  const pending = await token(disc, poll);
  equal([pending.status, pending.body.error], [400, 'authorization_pending'], 'the first poll');

  // The user, in a browser of their own: the code, the confirmation, the sign-in.
  const jar = deviceJar;
  const input = await request(da.verification_uri, { jar });
  equal(input.status, 200, 'the verification page');
  const f1 = formOf(input, 'op.deviceInputForm');
  expect(/<input[^>]*name="user_code"/.test(input.text) && input.text.includes('id="device-continue"'), 'the code form lacks user_code or #device-continue');
  const confirm = await request(f1.action, { method: 'POST', form: { ...f1.hidden, user_code: da.user_code.toLowerCase() }, jar });
  equal(confirm.status, 200, 'the confirmation page');
  equal(textOf(confirm, 'user-code'), da.user_code, 'the code shown for confirmation');
  const f2 = formOf(confirm, 'op.deviceConfirmForm');
  let r = await follow(await request(f2.action, { method: 'POST', form: f2.hidden, jar }), jar);
  const login = formOf(r.page, 'login-form');
  r = await follow(await request(login.action, { method: 'POST', form: { login: 'ada@example.test' }, jar }), jar);
  expect(r.page?.text.includes('id="device-success"'), `no success page: ${r.page?.status} ${r.page?.text.slice(0, 300)}`);

  // The device polls at the interval it was given, until it has its tokens or the code expires.
  let polls = 1;
  for (;;) {
    const { status, body } = await token(disc, poll);
    polls += 1;
    if (status === 200) {
      cli = body;
      break;
    }
    expect(['authorization_pending', 'slow_down'].includes(body.error), `poll: ${status} ${JSON.stringify(body)}`);
    expect(polls < 10, 'still pending after 10 polls');
    await new Promise((resolve) => { setTimeout(resolve, da.interval * 1000); });
  }
  expect(cli.access_token && cli.refresh_token && cli.id_token, `device tokens missing: ${Object.keys(cli)}`);
  const { payload } = verifyIdToken(cli.id_token, { jwks, issuer: disc.issuer, audience: 'cli' });
  equal([payload.sub, payload.email, payload.groups], ['ada', 'ada@example.test', ['admins', 'engineers']], 'device ID token claims');
  return `user_code ${da.user_code}: authorization_pending, then after the form tokens at poll ${polls}; ID token aud cli, sub ${payload.sub}`;
});

await step('#cancel, a wrong user code and #device-abort', async () => {
  const jar = new Jar();
  const url = authorizeUrl(disc, {
    client_id: 'web', response_type: 'code', scope: 'openid', redirect_uri: CALLBACK, state: 'c', code_challenge: 'x'.repeat(43), code_challenge_method: 'S256',
  });
  const r = await follow(await request(url, { jar }), jar);
  const cancel = formOf(r.page, 'cancel-form');
  const back = await follow(await request(cancel.action, { method: 'POST', form: {}, jar }), jar);
  equal(back.redirect?.searchParams.get('error'), 'access_denied', 'the error after #cancel');

  const da = (await request(disc.device_authorization_endpoint, { method: 'POST', form: { client_id: 'cli', scope: 'openid' } })).json();
  const input = await request(da.verification_uri, { jar });
  const f1 = formOf(input, 'op.deviceInputForm');
  const wrong = await request(f1.action, { method: 'POST', form: { ...f1.hidden, user_code: 'BBBB-BBBB' }, jar });
  expect(textOf(wrong, 'error'), `no #error after a wrong code (${wrong.status})`);
  const f2 = formOf(wrong, 'op.deviceInputForm');
  const confirm = await request(f2.action, { method: 'POST', form: { ...f2.hidden, user_code: da.user_code }, jar });
  const f3 = formOf(confirm, 'op.deviceConfirmForm');
  await request(f3.action, { method: 'POST', form: { ...f3.hidden, abort: 'yes' }, jar });
  const { status, body } = await token(disc, { grant_type: DEVICE_GRANT, device_code: da.device_code, client_id: 'cli' });
  equal([status, body.error], [400, 'access_denied'], 'the poll after #device-abort');
  return `#cancel: access_denied at the client; wrong code: "${textOf(wrong, 'error')}"; abort: the poll answers access_denied`;
});

await step('refresh grant (confidential and public client; rotated)', async () => {
  const w = await tokenOk(disc, { grant_type: 'refresh_token', refresh_token: web.refresh_token }, webAuth);
  expect(w.refresh_token && w.refresh_token !== web.refresh_token, 'the web client\'s refresh token was not rotated');
  expect(w.access_token !== web.access_token, 'no new access token');
  const { payload } = verifyIdToken(w.id_token, { jwks, issuer: disc.issuer, audience: 'web' });
  equal(payload.groups, ['admins', 'engineers'], 'groups in the refreshed ID token');
  web = w;
  const c = await tokenOk(disc, { grant_type: 'refresh_token', refresh_token: cli.refresh_token, client_id: 'cli' });
  expect(c.refresh_token && c.refresh_token !== cli.refresh_token, 'the device\'s refresh token was not rotated');
  cli = c;
  return 'web and cli: new access, refresh and ID tokens';
});

await step('RP-initiated logout through the logout form', async () => {
  const u = new URL(disc.end_session_endpoint);
  u.searchParams.set('id_token_hint', web.id_token);
  u.searchParams.set('post_logout_redirect_uri', LOGGED_OUT);
  u.searchParams.set('state', 'bye');
  const confirmPage = await request(u.href, { jar: webJar });
  equal(confirmPage.status, 200, 'the logout page');
  expect(confirmPage.text.includes('id="logout-yes"'), 'no #logout-yes on the logout page');
  const f = formOf(confirmPage, 'op.logoutForm');
  const r = await follow(await request(f.action, { method: 'POST', form: { ...f.hidden, logout: 'yes' }, jar: webJar }), webJar);
  expect(r.redirect?.href.startsWith(LOGGED_OUT), `no redirect to the post-logout URI: ${r.page?.status}`);
  equal(r.redirect.searchParams.get('state'), 'bye', 'state after logout');
  const again = await follow(await request(authorizeUrl(disc, { client_id: 'web', response_type: 'code', scope: 'openid', redirect_uri: CALLBACK, code_challenge: 'x'.repeat(43), code_challenge_method: 'S256' }), { jar: webJar }), webJar);
  expect(again.page?.text.includes('id="login-form"'), 'the session survived the logout');
  const still = await tokenOk(disc, { grant_type: 'refresh_token', refresh_token: web.refresh_token }, webAuth);
  web = still;
  return 'redirected with state; the next sign-in shows the form; refresh tokens outlive the session';
});

await step('disable ada: refresh invalid_grant, userinfo invalid_token, sign-in refused', async () => {
  const d = await control(ready.control, 'POST', '/disable/ada');
  equal([d.status, d.body], [200, { account: 'ada', enabled: false }], 'POST /disable/ada');
  const w = await token(disc, { grant_type: 'refresh_token', refresh_token: web.refresh_token }, webAuth);
  equal([w.status, w.body.error], [400, 'invalid_grant'], 'web refresh after disable');
  const c = await token(disc, { grant_type: 'refresh_token', refresh_token: cli.refresh_token, client_id: 'cli' });
  equal([c.status, c.body.error], [400, 'invalid_grant'], 'device refresh after disable');
  const ui = await request(disc.userinfo_endpoint, { headers: { authorization: `Bearer ${web.access_token}` } });
  equal(ui.status, 401, 'userinfo status after disable');
  expect(/invalid_token/.test(ui.headers['www-authenticate'] ?? ''), `userinfo WWW-Authenticate: ${ui.headers['www-authenticate']}`);
  // ada's session at the provider (from the device's confirmation) asks for a sign-in again.
  const r = await follow(await request(authorizeUrl(disc, { client_id: 'web', response_type: 'code', scope: 'openid', redirect_uri: CALLBACK, code_challenge: 'x'.repeat(43), code_challenge_method: 'S256' }), { jar: deviceJar }), deviceJar);
  expect(r.page, `ada's session was not asked to sign in again: redirected to ${r.redirect}`);
  const f = formOf(r.page, 'login-form');
  const refused = await request(f.action, { method: 'POST', form: { login: 'ada' }, jar: deviceJar });
  equal(refused.status, 403, 'signing in as a disabled account');
  expect(refused.text.includes('id="login-form"'), 'the refused sign-in does not show the form again');
  return `refresh: ${w.body.error}; userinfo: 401 invalid_token; ada's session asked to sign in again, then 403 "${textOf(refused, 'error')}"`;
});

await step('enable ada: the same refresh token works again', async () => {
  const e = await control(ready.control, 'POST', '/enable/ada');
  equal([e.status, e.body], [200, { account: 'ada', enabled: true }], 'POST /enable/ada');
  web = await tokenOk(disc, { grant_type: 'refresh_token', refresh_token: web.refresh_token }, webAuth);
  return 'refreshed';
});

await step('a wrong-domain account signs in at the provider', async () => {
  const jar = new Jar();
  const m = await authorize(disc, jar, { login: 'mallory@elsewhere.test', scope: 'openid email' });
  const t = await tokenOk(disc, {
    grant_type: 'authorization_code', code: m.code, redirect_uri: CALLBACK, code_verifier: m.verifier,
  }, webAuth);
  const { payload } = verifyIdToken(t.id_token, {
    jwks, issuer: disc.issuer, audience: 'web', nonce: m.nonce,
  });
  equal(payload.email, 'mallory@elsewhere.test', 'mallory\'s email');
  expect(!('groups' in payload) && !('name' in payload), 'claims of scopes not asked for (groups, profile) are in the ID token');
  return `email claim ${payload.email} (refusing the domain is the daemon's job)`;
});

await step('PUT /clients/web: a redirect URI set while the provider runs', async () => {
  const other = 'http://127.0.0.1:9/elsewhere';
  const bad = await request(`${ready.control}/clients/web`, { method: 'PUT', headers: { 'content-type': 'application/json' } });
  equal(bad.status, 400, 'an empty client');
  const put = await new Promise((resolve, reject) => {
    const body = JSON.stringify({ ...baseConfig.clients[0], redirect_uris: [other] });
    const req = http.request(`${ready.control}/clients/web`, { method: 'PUT', signal: AbortSignal.timeout(REQUEST_MS) }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', reject);
    req.end(body);
  });
  equal(put, 200, 'PUT /clients/web');
  const m = await authorize(disc, new Jar(), { login: 'ada', redirectUri: other });
  await tokenOk(disc, {
    grant_type: 'authorization_code', code: m.code, redirect_uri: other, code_verifier: m.verifier,
  }, webAuth);
  return `code flow to ${other}`;
});

await step('POST /stop ends the provider', async () => {
  const s = await control(ready.control, 'POST', '/stop');
  equal([s.status, s.body], [200, { stopping: true }], 'POST /stop');
  const { code } = await within(main.exited, EXIT_MS, 'exit after /stop');
  equal(code, 0, 'exit status');
  equal(main.stdout().trim().split('\n').length, 1, 'lines on stdout');
  for (const secret of [WEB.client_secret, web.refresh_token, web.access_token]) {
    expect(!main.stderr().includes(secret), 'a secret is on stderr');
  }
  return 'exit 0; one line on stdout; no client secret or token on stderr';
});

await step('closing stdin ends the provider', async () => {
  const p = startProvider(baseConfig, 'stdin');
  current = p;
  await p.ready;
  p.child.stdin.end();
  const { code } = await within(p.exited, EXIT_MS, 'exit after stdin closed');
  equal(code, 0, 'exit status');
  return 'exit 0';
});

await step('SIGTERM ends the provider', async () => {
  const p = startProvider(baseConfig, 'sigterm');
  current = p;
  await p.ready;
  p.child.kill('SIGTERM');
  const { code } = await within(p.exited, EXIT_MS, 'exit after SIGTERM');
  equal(code, 0, 'exit status');
  return 'exit 0';
});

await step('a non-loopback host is refused', async () => {
  const p = startProvider({ ...baseConfig, host: '0.0.0.0' }, 'wildcard');
  current = p;
  p.ready.catch(() => {});
  const { code } = await within(p.exited, EXIT_MS, 'exit with host 0.0.0.0');
  equal(code, 2, 'exit status');
  equal(p.stdout(), '', 'stdout');
  expect(/not a loopback address/.test(p.stderr()), `stderr: ${p.stderr()}`);
  return `exit 2: ${p.stderr().trim()}`;
});

current = undefined;
console.log(`took ${((Date.now() - started) / 1000).toFixed(1)} s`);
console.log(`oidc: ${passed} passed, 0 failed`);
finish(0);
