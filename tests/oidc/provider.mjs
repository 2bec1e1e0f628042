#!/usr/bin/env node
// A real OpenID Connect provider for the test suite: panva's certified oidc-provider, on loopback
// only, over HTTPS with the certificate the test made, its accounts and clients from one JSON file.
//
//   node provider.mjs CONFIG.json
//
// The configuration's schema, the control port's requests and the sign-in pages' stable element
// names are in README.md beside this file. On ready, stdout carries exactly one line,
// {"issuer":"https://127.0.0.1:PORT","control":"http://127.0.0.1:PORT"}, and nothing else ever;
// diagnostics go to stderr, never a secret (keys, client secrets, codes, tokens). The process ends
// when its stdin closes (a test that dies cannot leave it running), on SIGTERM or SIGINT, and on the
// control port's POST /stop. A configuration it refuses: one `oidc: ERROR:` line and exit status 2.

import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';

// oidc-provider prints its notices with console.info, which is stdout: only the ready line may be
// there, so everything console prints goes to stderr. Set before oidc-provider is loaded.
console.log = console.info = console.debug = (...args) => console.error(...args);

const log = (msg) => process.stderr.write(`oidc: ${msg}\n`);
function refuse(msg) {
  process.stderr.write(`oidc: ERROR: ${msg}\n`);
  process.exit(2);
}

const GRANT_TYPES = ['authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:device_code'];
const AUTH_METHODS = ['client_secret_basic', 'client_secret_post', 'none'];
// Seconds. Short by default so that expiry and renewal can be seen in a test; each can be set.
const TTL_DEFAULTS = { access_token: 60, id_token: 60, refresh_token: 600, authorization_code: 60, device_code: 300 };
// The login session at the provider, and an interaction (one pass through the login page).
const SESSION_TTL = 24 * 60 * 60;
const INTERACTION_TTL = 10 * 60;
// The largest form or control body read (a login or a client's metadata is far smaller).
const BODY_LIMIT = 64 * 1024;

// ---------------------------------------------------------------- configuration

function only(obj, allowed, what) {
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) refuse(`${what} must be a JSON object`);
  for (const key of Object.keys(obj)) {
    if (!allowed.includes(key)) refuse(`${what}: unknown key "${key}" (known: ${allowed.join(', ')})`);
  }
}
const isString = (v) => typeof v === 'string' && v.length > 0;
const isStrings = (v) => Array.isArray(v) && v.every(isString);
const isSeconds = (v) => Number.isInteger(v) && v > 0;

// Loopback only: an IPv4 address in 127.0.0.0/8 or ::1. A name (even localhost) is refused, since
// what it resolves to is not this program's to check.
const LOOPBACK = new net.BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
const loopback = (host) => (net.isIPv4(host) && LOOPBACK.check(host, 'ipv4')) || (net.isIPv6(host) && LOOPBACK.check(host, 'ipv6'));

function readConfig(path) {
  if (!path) refuse('usage: node provider.mjs CONFIG.json');
  let cfg;
  try {
    cfg = JSON.parse(fs.readFileSync(path, 'utf8'));
  } catch (err) {
    refuse(`cannot read the configuration ${path}: ${err.message}`);
  }
  only(cfg, ['cert', 'key', 'host', 'port', 'control_port', 'clients', 'accounts', 'ttl', 'rotate_refresh_tokens', 'device_interval'], 'configuration');
  const host = cfg.host ?? '127.0.0.1';
  if (typeof host !== 'string' || !loopback(host)) refuse(`host ${JSON.stringify(host)} is not a loopback address (127.0.0.1, 127.x.y.z or ::1)`);
  for (const p of ['port', 'control_port']) {
    const v = cfg[p] ?? 0;
    if (!Number.isInteger(v) || v < 0 || v > 65535) refuse(`${p} must be a port number (0: any free port)`);
  }
  if (!isString(cfg.cert) || !isString(cfg.key)) refuse('cert and key must name the PEM files of the HTTPS listener');
  let tls;
  try {
    tls = { cert: fs.readFileSync(cfg.cert), key: fs.readFileSync(cfg.key) };
  } catch (err) {
    refuse(`cannot read the certificate or its key: ${err.message}`);
  }

  const ttl = { ...TTL_DEFAULTS };
  if (cfg.ttl !== undefined) {
    only(cfg.ttl, Object.keys(TTL_DEFAULTS), 'ttl');
    for (const [k, v] of Object.entries(cfg.ttl)) {
      if (!isSeconds(v)) refuse(`ttl.${k} must be a whole number of seconds, at least 1`);
      ttl[k] = v;
    }
  }
  const rotate = cfg.rotate_refresh_tokens ?? true;
  if (typeof rotate !== 'boolean') refuse('rotate_refresh_tokens must be true or false');
  const interval = cfg.device_interval === undefined ? 1 : cfg.device_interval;
  if (interval !== null && !isSeconds(interval)) refuse('device_interval must be a whole number of seconds, at least 1, or null');

  if (!Array.isArray(cfg.accounts) || cfg.accounts.length === 0) refuse('accounts must be a non-empty array');
  const accounts = cfg.accounts.map((a, i) => account(a, `accounts[${i}]`));
  const seen = new Set();
  for (const a of accounts) {
    for (const name of [a.id, a.email?.toLowerCase()].filter(Boolean)) {
      if (seen.has(name)) refuse(`accounts: "${name}" names two accounts (ids and emails sign in alike, so each must be unique)`);
      seen.add(name);
    }
  }

  if (!Array.isArray(cfg.clients) || cfg.clients.length === 0) refuse('clients must be a non-empty array');
  const clients = cfg.clients.map((c, i) => clientMetadata(c, `clients[${i}]`));
  if (new Set(clients.map((c) => c.client_id)).size !== clients.length) refuse('clients: two clients have the same client_id');

  return {
    host, port: cfg.port ?? 0, controlPort: cfg.control_port ?? 0, tls, ttl, rotate, interval, accounts, clients,
  };
}

function account(a, what) {
  only(a, ['id', 'email', 'email_verified', 'name', 'groups'], what);
  if (!isString(a.id)) refuse(`${what}.id must be a non-empty string (it is the sub claim)`);
  if (a.email !== undefined && !isString(a.email)) refuse(`${what}.email must be a string`);
  if (a.email_verified !== undefined && typeof a.email_verified !== 'boolean') refuse(`${what}.email_verified must be true or false`);
  if (a.name !== undefined && !isString(a.name)) refuse(`${what}.name must be a string`);
  if (a.groups !== undefined && !(Array.isArray(a.groups) && a.groups.every((g) => typeof g === 'string'))) refuse(`${what}.groups must be an array of strings`);
  return {
    id: a.id, email: a.email, email_verified: a.email_verified ?? true, name: a.name, groups: a.groups ?? [],
  };
}

// A client of the configuration (or of PUT /clients/ID) as oidc-provider's client metadata.
// Throws an Error (not refuse) so that the control port can answer 400 with it.
function clientMetadata(c, what) {
  const bad = (msg) => { throw new Error(`${what}: ${msg}`); };
  if (c === null || typeof c !== 'object' || Array.isArray(c)) bad('must be a JSON object');
  const allowed = ['client_id', 'client_secret', 'redirect_uris', 'post_logout_redirect_uris', 'grant_types', 'token_endpoint_auth_method', 'application_type', 'client_name'];
  for (const key of Object.keys(c)) if (!allowed.includes(key)) bad(`unknown key "${key}" (known: ${allowed.join(', ')})`);
  if (!isString(c.client_id)) bad('client_id must be a non-empty string');
  if (!isStrings(c.grant_types) || c.grant_types.length === 0 || !c.grant_types.every((g) => GRANT_TYPES.includes(g))) {
    bad(`grant_types must be a non-empty array of ${GRANT_TYPES.join(', ')}`);
  }
  const auth = c.token_endpoint_auth_method ?? (c.client_secret === undefined ? 'none' : 'client_secret_basic');
  if (!AUTH_METHODS.includes(auth)) bad(`token_endpoint_auth_method must be one of ${AUTH_METHODS.join(', ')}`);
  if (auth === 'none' && c.client_secret !== undefined) bad('a client_secret with token_endpoint_auth_method "none"');
  if (auth !== 'none' && !isString(c.client_secret)) bad(`token_endpoint_auth_method "${auth}" needs a client_secret`);
  const code = c.grant_types.includes('authorization_code');
  if (code && !(isStrings(c.redirect_uris) && c.redirect_uris.length)) bad('the authorization_code grant needs redirect_uris');
  if (!code && c.redirect_uris !== undefined) bad('redirect_uris without the authorization_code grant');
  for (const k of ['post_logout_redirect_uris']) if (c[k] !== undefined && !isStrings(c[k])) bad(`${k} must be an array of URIs`);
  if (c.application_type !== undefined && !['web', 'native'].includes(c.application_type)) bad('application_type must be "web" or "native"');
  if (c.client_name !== undefined && !isString(c.client_name)) bad('client_name must be a string');
  return {
    client_id: c.client_id,
    ...(auth === 'none' ? {} : { client_secret: c.client_secret }),
    token_endpoint_auth_method: auth,
    grant_types: c.grant_types,
    response_types: code ? ['code'] : [],
    redirect_uris: code ? c.redirect_uris : [],
    ...(c.post_logout_redirect_uris ? { post_logout_redirect_uris: c.post_logout_redirect_uris } : {}),
    ...(c.application_type ? { application_type: c.application_type } : {}),
    ...(c.client_name ? { client_name: c.client_name } : {}),
    id_token_signed_response_alg: 'RS256',
  };
}

const config = readConfig(process.argv[2]);

// ---------------------------------------------------------------- state

// Accounts by id and by lower-cased email; `disabled` holds ids.
const accountsById = new Map(config.accounts.map((a) => [a.id, a]));
const accountsByEmail = new Map(config.accounts.filter((a) => a.email).map((a) => [a.email.toLowerCase(), a]));
const disabled = new Set();
const lookup = (name) => accountsById.get(name) ?? accountsByEmail.get(String(name).toLowerCase());
const enabled = (id) => accountsById.has(id) && !disabled.has(id);

// Client metadata by client_id. oidc-provider reads clients it was not given statically through the
// adapter's find, so PUT /clients/ID can replace one while the provider runs (a redirect URI on the
// port the daemon under test got only after the provider started).
const clients = new Map(config.clients.map((c) => [c.client_id, c]));

// Everything else oidc-provider keeps (sessions, interactions, codes, tokens, grants), in memory:
// key -> { payload, expiresAt (ms) }. Expired entries are dropped when read, and swept now and then.
const store = new Map();
const grants = new Map(); // grantId -> Set of keys, for revokeByGrantId
const GRANTABLE = new Set(['AccessToken', 'AuthorizationCode', 'RefreshToken', 'DeviceCode', 'BackchannelAuthenticationRequest']);
const SWEEP_EVERY = 500; // writes
let writes = 0;

function get(key) {
  const entry = store.get(key);
  if (entry === undefined) return undefined;
  if (entry.expiresAt <= Date.now()) {
    store.delete(key);
    return undefined;
  }
  return entry.payload;
}
function put(key, payload, expiresIn) {
  store.set(key, { payload, expiresAt: expiresIn ? Date.now() + expiresIn * 1000 : Infinity });
  if (++writes % SWEEP_EVERY === 0) {
    const now = Date.now();
    for (const [k, e] of store) if (e.expiresAt <= now) store.delete(k);
  }
}

class Adapter {
  constructor(model) {
    this.model = model;
  }

  key(id) {
    return `${this.model}:${id}`;
  }

  async upsert(id, payload, expiresIn) {
    const key = this.key(id);
    put(key, payload, expiresIn);
    if (this.model === 'Session') put(`sessionUid:${payload.uid}`, id, expiresIn);
    if (payload.userCode) put(`userCode:${payload.userCode}`, id, expiresIn);
    if (GRANTABLE.has(this.model) && payload.grantId) {
      if (!grants.has(payload.grantId)) grants.set(payload.grantId, new Set());
      grants.get(payload.grantId).add(key);
    }
  }

  async find(id) {
    if (this.model === 'Client') return clients.has(id) ? structuredClone(clients.get(id)) : undefined;
    return get(this.key(id));
  }

  async findByUid(uid) {
    const id = get(`sessionUid:${uid}`);
    return id === undefined ? undefined : this.find(id);
  }

  async findByUserCode(userCode) {
    const id = get(`userCode:${userCode}`);
    return id === undefined ? undefined : this.find(id);
  }

  async consume(id) {
    const payload = get(this.key(id));
    if (payload) payload.consumed = Math.floor(Date.now() / 1000);
  }

  async destroy(id) {
    store.delete(this.key(id));
  }

  async revokeByGrantId(grantId) {
    for (const key of grants.get(grantId) ?? []) store.delete(key);
    grants.delete(grantId);
  }
}

// ---------------------------------------------------------------- pages

// Plain HTML, nothing loaded from elsewhere (the library's own pages import a web font), and stable
// element ids for a headless browser: README.md lists them.
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
const page = (title, body) => `<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>${esc(title)}</title></head>
<body>
<h1>${esc(title)}</h1>
${body}
</body>
</html>
`;

function loginPage(uid, client, { hint = '', error } = {}) {
  return page('Sign in', `<p id="client">to ${esc(client)}</p>
${error ? `<p id="error" role="alert">${esc(error)}</p>\n` : ''}<form id="login-form" method="post" action="/interaction/${esc(uid)}/login">
<label for="login">Account id or email</label>
<input id="login" name="login" type="text" value="${esc(hint)}" autocomplete="username" autofocus required>
<button id="sign-in" type="submit">Sign in</button>
</form>
<form id="cancel-form" method="post" action="/interaction/${esc(uid)}/abort">
<button id="cancel" type="submit">Cancel</button>
</form>`);
}

async function renderError(ctx, out) {
  ctx.type = 'html';
  ctx.body = page('Error', `<p id="error">${esc(out.error)}</p>
<p id="error-description">${esc(out.error_description ?? '')}</p>`);
}

async function userCodeInputSource(ctx, form, out, err) {
  let msg = '<p id="prompt">Enter the code shown by your device</p>';
  if (err && (err.userCode || err.name === 'NoCodeError')) msg = '<p id="error" role="alert">The code you entered is incorrect. Try again.</p>';
  else if (err && err.name === 'AbortedError') msg = '<p id="error" role="alert">The sign-in request was interrupted.</p>';
  else if (err) msg = '<p id="error" role="alert">There was an error processing your request.</p>';
  ctx.body = page('Device sign-in', `${msg}
${form}
<button id="device-continue" type="submit" form="op.deviceInputForm">Continue</button>`);
}

async function userCodeConfirmSource(ctx, form, client, deviceInfo, userCode) {
  ctx.body = page('Confirm device', `<p id="client">${esc(client.clientName ?? client.clientId)}</p>
<p>The following code should be displayed on your device: <code id="user-code">${esc(userCode)}</code></p>
${form}
<button id="device-confirm" type="submit" form="op.deviceConfirmForm">Continue</button>
<button id="device-abort" type="submit" form="op.deviceConfirmForm" name="abort" value="yes">Abort</button>`);
}

async function successSource(ctx) {
  ctx.body = page('Device signed in', '<p id="device-success">Your device is signed in. You can close this page.</p>');
}

async function logoutSource(ctx, form) {
  ctx.body = page('Sign out', `<p>Do you want to sign out from ${esc(ctx.host)}?</p>
${form}
<button id="logout-yes" type="submit" form="op.logoutForm" name="logout" value="yes">Yes, sign me out</button>
<button id="logout-no" type="submit" form="op.logoutForm">No, stay signed in</button>`);
}

async function postLogoutSuccessSource(ctx) {
  ctx.body = page('Signed out', '<p id="logout-success">You are signed out.</p>');
}

// ---------------------------------------------------------------- the provider

const { default: Provider, interactionPolicy, errors } = await import('oidc-provider');

// The HTTPS listener comes first: the issuer holds the port, known only once it listens. Until the
// provider is built, requests are answered 503.
let handler = (req, res) => {
  res.statusCode = 503;
  res.end();
};
const server = https.createServer(config.tls, (req, res) => handler(req, res));
await listen(server, config.port, 'the HTTPS listener');
const origin = (srv, scheme) => {
  const { address, port } = srv.address();
  return `${scheme}://${net.isIPv6(address) ? `[${address}]` : address}:${port}`;
};
const issuer = origin(server, 'https');

// The login prompt is asked again when the session's account has been disabled since, so a session
// at the provider does not outlive `disable`.
const policy = interactionPolicy.base();
policy.get('login').checks.add(new interactionPolicy.Check(
  'account_disabled',
  'the signed-in account is disabled',
  (ctx) => (ctx.oidc.session.accountId !== undefined && !enabled(ctx.oidc.session.accountId)
    ? interactionPolicy.Check.REQUEST_PROMPT
    : interactionPolicy.Check.NO_NEED_TO_PROMPT),
));

const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const cookieKey = crypto.randomBytes(32).toString('base64url');

const provider = new Provider(issuer, {
  adapter: Adapter,
  // A disabled account is not found: its refresh and device grants fail with invalid_grant, its
  // access tokens at userinfo with invalid_token.
  async findAccount(ctx, sub) {
    if (!enabled(sub)) return undefined;
    const a = accountsById.get(sub);
    return {
      accountId: a.id,
      async claims() {
        return {
          sub: a.id,
          ...(a.email === undefined ? {} : { email: a.email, email_verified: a.email_verified }),
          ...(a.name === undefined ? {} : { name: a.name }),
          groups: a.groups,
        };
      },
    };
  },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name'],
    groups: ['groups'],
  },
  scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
  // The claims of the granted scopes go into the ID token too, not only to userinfo.
  conformIdTokenClaims: false,
  responseTypes: ['code'],
  pkce: { methods: ['S256'], required: () => true },
  // Refresh tokens for every client allowed the grant, without offline_access (which oidc-provider
  // grants only with prompt=consent); they live their own TTL, not the provider's login session.
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  expiresWithSession: async () => false,
  rotateRefreshToken: config.rotate,
  ttl: {
    AccessToken: config.ttl.access_token,
    IdToken: config.ttl.id_token,
    RefreshToken: config.ttl.refresh_token,
    AuthorizationCode: config.ttl.authorization_code,
    DeviceCode: config.ttl.device_code,
    Grant: Math.max(config.ttl.refresh_token, SESSION_TTL),
    Session: SESSION_TTL,
    Interaction: INTERACTION_TTL,
  },
  jwks: { keys: [{ ...privateKey.export({ format: 'jwk' }), use: 'sig', alg: 'RS256' }] },
  cookies: {
    keys: [cookieKey],
    long: { signed: true, httpOnly: true, sameSite: 'none' },
    short: { signed: true, httpOnly: true, sameSite: 'lax' },
  },
  interactions: { policy, url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  features: {
    devInteractions: { enabled: false },
    deviceFlow: {
      enabled: true, userCodeInputSource, userCodeConfirmSource, successSource,
    },
    revocation: { enabled: true },
    rpInitiatedLogout: { enabled: true, logoutSource, postLogoutSuccessSource },
    resourceIndicators: { enabled: false },
    userinfo: { enabled: true },
  },
  renderError,
  clientBasedCORS: () => false,
});

for (const c of clients.values()) {
  try {
    await provider.Client.validate(c);
  } catch (err) {
    refuse(`client ${c.client_id}: ${err.error_description ?? err.message}`);
  }
}

// Errors worth a line for whoever reads a failed test's stderr: the OAuth error and its internal
// detail (e.g. "refresh token invalid (referenced account not found)"). Neither carries a secret.
const described = (err) => `${err.error ?? err.name}${err.error_detail ? ` (${err.error_detail})` : err.error_description ? ` (${err.error_description})` : ''}`;
for (const event of ['grant.error', 'authorization.error', 'userinfo.error', 'revocation.error', 'end_session.error', 'device_authorization.error', 'code_verification.error']) {
  provider.on(event, (ctx, err) => log(`${event}: ${described(err)}`));
}
provider.on('server_error', (ctx, err) => log(`server_error: ${err.stack ?? err}`));

// The sign-in pages (interactions) and the device authorization response's interval, ahead of
// oidc-provider's own routes.
provider.use(async (ctx, next) => {
  const m = /^\/interaction\/([^/]+)(?:\/(login|abort))?$/.exec(ctx.path);
  if (m) {
    ctx.set('cache-control', 'no-store');
    try {
      await interaction(ctx, m[1], m[2]);
    } catch (err) {
      ctx.status = err.statusCode ?? err.status ?? 500;
      await renderError(ctx, { error: err.error ?? (ctx.status < 500 ? 'invalid_request' : 'server_error'), error_description: err.error_description ?? err.message });
      log(`interaction: ${described(err)}`);
    }
    return;
  }
  await next();
  // RFC 8628 lets a client poll no more often than `interval` (5 s when absent); oidc-provider
  // leaves it out, so a test's `mediatord login` would wait 5 s a round.
  if (ctx.oidc?.route === 'device_authorization' && ctx.status === 200 && config.interval !== null) {
    ctx.body = { ...ctx.body, interval: config.interval };
  }
});

async function interaction(ctx, uid, action) {
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  if (details.uid !== uid) throw new errors.SessionNotFound('interaction session id cookie not found');
  const client = await provider.Client.find(details.params.client_id);
  const clientName = client?.clientName ?? details.params.client_id;
  const finish = async (result, merge) => {
    const to = await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: merge });
    ctx.status = 303;
    ctx.redirect(to);
  };

  if (action === undefined) {
    if (ctx.method !== 'GET') ctx.throw(405);
    if (details.prompt.name === 'consent') {
      // Consent is granted at once: the clients are the project's own.
      const d = details.prompt.details;
      const grant = details.grantId
        ? await provider.Grant.find(details.grantId)
        : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
      if (d.missingOIDCScope) grant.addOIDCScope(d.missingOIDCScope.join(' '));
      if (d.missingOIDCClaims) grant.addOIDCClaims(d.missingOIDCClaims);
      for (const [indicator, scopes] of Object.entries(d.missingResourceScopes ?? {})) grant.addResourceScope(indicator, scopes.join(' '));
      await finish({ consent: { grantId: await grant.save() } }, true);
      return;
    }
    if (details.prompt.name !== 'login') ctx.throw(501, `prompt ${details.prompt.name} is not implemented`);
    ctx.type = 'html';
    ctx.body = loginPage(uid, clientName, { hint: details.params.login_hint ?? '' });
    return;
  }

  if (ctx.method !== 'POST') ctx.throw(405);
  if (action === 'abort') {
    await finish({ error: 'access_denied', error_description: 'End-User aborted interaction' }, false);
    return;
  }
  if (details.prompt.name !== 'login') ctx.throw(400, 'this interaction does not ask for a login');
  const form = new URLSearchParams(await body(ctx.req));
  const login = (form.get('login') ?? '').trim();
  const a = lookup(login);
  if (!a || disabled.has(a.id)) {
    ctx.status = 403;
    ctx.type = 'html';
    ctx.body = loginPage(uid, clientName, { hint: login, error: a ? `The account ${login} is disabled.` : `There is no account ${login}.` });
    log(`sign-in refused: ${a ? `${a.id} is disabled` : 'no such account'} (client ${details.params.client_id})`);
    return;
  }
  log(`sign-in: ${a.id} (client ${details.params.client_id})`);
  await finish({ login: { accountId: a.id } }, false);
}

handler = provider.callback();

// ---------------------------------------------------------------- control

// Plain HTTP on loopback, for the test only: each answer means the change is in effect.
const control = http.createServer(async (req, res) => {
  const reply = (status, value) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(`${JSON.stringify(value)}\n`);
  };
  try {
    const path = new URL(req.url, 'http://control').pathname;
    let m;
    if (path === '/' && req.method === 'GET') {
      reply(200, {
        issuer,
        accounts: [...accountsById.values()].map((a) => ({ id: a.id, email: a.email, enabled: !disabled.has(a.id) })),
        clients: [...clients.keys()],
      });
    } else if ((m = /^\/(disable|enable)\/([^/]+)$/.exec(path)) && req.method === 'POST') {
      const a = lookup(decodeURIComponent(m[2]));
      if (!a) {
        reply(404, { error: `no account ${decodeURIComponent(m[2])}` });
        return;
      }
      if (m[1] === 'disable') disabled.add(a.id);
      else disabled.delete(a.id);
      log(`control: ${m[1]} ${a.id}`);
      reply(200, { account: a.id, enabled: !disabled.has(a.id) });
    } else if ((m = /^\/clients\/([^/]+)$/.exec(path)) && req.method === 'PUT') {
      const id = decodeURIComponent(m[1]);
      let meta;
      try {
        meta = clientMetadata(JSON.parse(await body(req)), `client ${id}`);
        if (meta.client_id !== id) throw new Error(`client ${id}: client_id is ${meta.client_id}`);
        await provider.Client.validate(meta);
      } catch (err) {
        reply(400, { error: err.error_description ?? err.message });
        return;
      }
      clients.set(id, meta);
      log(`control: client ${id} set`);
      reply(200, { client_id: id });
    } else if (path === '/stop' && req.method === 'POST') {
      res.on('finish', () => stop('POST /stop'));
      reply(200, { stopping: true });
    } else {
      reply(404, { error: `no such control request: ${req.method} ${path}` });
    }
  } catch (err) {
    reply(500, { error: err.message });
  }
});
await listen(control, config.controlPort, 'the control listener');

function listen(srv, port, what) {
  return new Promise((resolve) => {
    srv.once('error', (err) => {
      log(`ERROR: ${what} cannot listen on ${config.host}:${port}: ${err.message}`);
      process.exit(1);
    });
    srv.listen(port, config.host, resolve);
  });
}

function body(req) {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks = [];
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > BODY_LIMIT) {
        reject(Object.assign(new Error('request body too large'), { status: 413 }));
        req.destroy();
      } else {
        chunks.push(chunk);
      }
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function stop(why) {
  log(`stopping: ${why}`);
  process.exit(0);
}
process.on('SIGTERM', () => stop('SIGTERM'));
process.on('SIGINT', () => stop('SIGINT'));
process.stdin.on('end', () => stop('stdin closed'));
process.stdin.on('error', () => stop('stdin closed'));
process.stdin.resume();

process.stdout.write(`${JSON.stringify({ issuer, control: origin(control, 'http') })}\n`);
log(`ready: issuer ${issuer}, ${accountsById.size} accounts, clients ${[...clients.keys()].join(', ')}`);
