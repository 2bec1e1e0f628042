// A headless Chromium driven over the W3C WebDriver protocol (chromedriver), for the e2e tests
// that need a person's clicks in the web app beside a real agent. The same Debian chromium and
// chromium-driver as tests/browser.rs (run.sh installs them with tests/browser/install.sh).
// Every wait is bounded; close() ends chromedriver and every Chromium it started (its process group).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** The W3C name of an element reference in a WebDriver answer. */
const ELEMENT = 'element-6066-11e4-a52e-4f735466cecf';
/** Between two looks for something on the page. */
const POLL_MS = 50;

export class Browser {
  static async start(timeoutMs) {
    const home = fs.mkdtempSync(path.join(os.tmpdir(), 'mediatord-e2e-chromium-'));
    // A TMPDIR of its own too, as tests/browser.rs gives it: Chromium keeps its singleton socket
    // and scoped directories there and, killed by close(), leaves them behind; under home they go
    // with it.
    const tmp = path.join(home, 'tmp');
    fs.mkdirSync(tmp);
    // Port 0: chromedriver binds a free port and says which on its stdout.
    const child = spawn('chromedriver', ['--port=0', '--allowed-ips=127.0.0.1'], {
      detached: true, // its own process group, which its Chromiums join: close() ends them all
      env: {
        ...process.env,
        HOME: home,
        XDG_CONFIG_HOME: path.join(home, '.config'),
        XDG_CACHE_HOME: path.join(home, '.cache'),
        TMPDIR: tmp,
      },
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const browser = new Browser(child, home);
    // Its own process group outlives this process unless ended: on a normal exit, and on the
    // SIGTERM or SIGINT that would otherwise end this process before the test's after() ran.
    process.once('exit', () => browser.close());
    for (const signal of ['SIGTERM', 'SIGINT']) {
      process.once(signal, () => {
        browser.close();
        process.exit(128 + os.constants.signals[signal]);
      });
    }
    const port = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`chromedriver did not say its port within ${timeoutMs} ms`)), timeoutMs);
      let out = '';
      child.stdout.on('data', (chunk) => {
        out += chunk;
        const m = /started successfully on port (\d+)/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(Number(m[1]));
        }
      });
      child.on('error', (e) => {
        clearTimeout(timer);
        reject(new Error(`chromedriver did not start (run tests/browser/install.sh): ${e.message}`));
      });
    }).catch((e) => {
      browser.close();
      throw e;
    });
    browser.url = `http://127.0.0.1:${port}`;
    const profile = path.join(home, 'profile');
    const args = ['--headless=new', '--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--no-first-run',
      '--disable-extensions', '--disable-background-networking', '--disable-component-update', `--user-data-dir=${profile}`];
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        const created = await browser.command('POST', '/session', {
          capabilities: { alwaysMatch: { browserName: 'chrome', 'goog:chromeOptions': { args } } },
        });
        browser.session = created.sessionId;
        return browser;
      } catch (e) {
        // chromedriver said its port before it answers on it: retried until the deadline.
        if (Date.now() > deadline) {
          browser.close();
          throw e;
        }
        await new Promise((r) => setTimeout(r, POLL_MS));
      }
    }
  }

  constructor(child, home) {
    this.child = child;
    this.home = home;
    this.url = '';
    this.session = '';
  }

  async command(method, route, body) {
    const res = await fetch(`${this.url}${route}`, {
      method,
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    const json = await res.json();
    if (!res.ok) throw new Error(`WebDriver ${method} ${route}: ${res.status} ${JSON.stringify(json.value ?? json)}`);
    return json.value;
  }

  at(route) {
    return `/session/${this.session}${route}`;
  }

  goto(url) {
    return this.command('POST', this.at('/url'), { url });
  }

  js(script) {
    return this.command('POST', this.at('/execute/sync'), { script, args: [] });
  }

  /** Waits until `expr` (JavaScript) is truthy on the page; its value. */
  async until(what, expr, timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = await this.js(`return (${expr});`).catch(() => null);
      if (v) return v;
      if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}`);
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  /** Clicks the element `xpath` names (a real pointer click, as a person's) once it is there. */
  async click(what, xpath, timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        const el = await this.command('POST', this.at('/element'), { using: 'xpath', value: xpath });
        const id = el?.[ELEMENT];
        if (!id) throw new Error(`not an element: ${JSON.stringify(el)}`);
        await this.command('POST', this.at(`/element/${id}/click`), {});
        return;
      } catch (e) {
        if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms to click ${what} (${xpath}): ${e.message}`);
        await new Promise((r) => setTimeout(r, POLL_MS));
      }
    }
  }

  close() {
    try {
      process.kill(-this.child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
    fs.rmSync(this.home, { recursive: true, force: true });
  }
}
