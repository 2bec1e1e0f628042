// What a session changed (issue #42, docs/protocol.md §18), through @qwen-code/sdk's DaemonClient
// over REST, unchanged, on the built-in demo agent (run.sh's `changes-demo` phase): the rewind
// snapshots and a rewind, the workspace diff and a file's hunks, the file routes (a stale
// expectedHash refused) — first in a plain directory, then with the workspace made a git
// repository, whose index, refs, stash and status must come out byte for byte as they were.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { DaemonClient } from '@qwen-code/sdk/daemon';
import { negotiateTransport } from '@qwen-code/sdk/daemon/transports';
import { BASE_URL, T, WORKSPACE } from './lib.mjs';

const client = new DaemonClient({ baseUrl: BASE_URL, fetchTimeoutMs: T.request });
const CLIENT = 'e2e-changes';
let sid;

/** A blocking prompt through the SDK; the answer (with its promptId). */
async function turn(text) {
  return client.prompt(sid, { prompt: [{ type: 'text', text }] }, AbortSignal.timeout(T.turn), CLIENT);
}

function read(rel) {
  return fs.readFileSync(path.join(WORKSPACE, rel), 'utf8');
}

/**
 * Rejects with the SDK's DaemonHttpError of `status` (and `code`: the body's over REST; over ACP
 * the SDK gives the JSON-RPC error's data as `body.data`, where the code is).
 */
async function rejectsWith(promise, status, code) {
  await assert.rejects(promise, (err) => {
    assert.equal(err.status, status, `${err.message} ${JSON.stringify(err.body)}`);
    if (code) assert.equal(err.body?.data?.code ?? err.body?.code, code, JSON.stringify(err.body));
    return true;
  });
}

test('a plain directory: rewind snapshots, the workspace diff against the first snapshot, files', async () => {
  const created = await client.createOrAttachSession({ workspaceCwd: WORKSPACE }, CLIENT);
  sid = created.sessionId;
  const first = await turn('put plain.txt one');
  assert.equal(first.stopReason, 'end_turn');
  const { snapshots } = await client.getRewindSnapshots(sid);
  assert.equal(snapshots.length, 1, JSON.stringify(snapshots));
  assert.equal(snapshots[0].promptId, first.promptId);
  assert.equal(snapshots[0].turnIndex, 0);
  assert.deepEqual(snapshots[0].diffStats, { filesChanged: 1, insertions: 1, deletions: 0 });

  const diff = await client.workspaceGitDiff();
  assert.equal(diff.v, 1);
  assert.equal(diff.available, true, JSON.stringify(diff));
  assert.equal(diff.workspaceCwd, WORKSPACE);
  assert.deepEqual(diff.files.map((f) => [f.path, f.added, f.removed]), [['plain.txt', 1, 0]]);
  const hunks = await client.workspaceGitDiffFile('plain.txt');
  assert.deepEqual(hunks.hunks.map((h) => h.lines), [['+one']]);

  // The file routes, with hashes.
  const file = await client.readWorkspaceFile('plain.txt', {}, CLIENT);
  assert.equal(file.content, 'one');
  assert.equal(file.hash, `sha256:${createHash('sha256').update('one').digest('hex')}`);
  const written = await client.writeWorkspaceFile(
    { path: 'plain.txt', content: 'two', mode: 'replace', expectedHash: file.hash },
    CLIENT,
  );
  assert.equal(written.kind, 'file_write');
  assert.equal(read('plain.txt'), 'two');
  await rejectsWith(
    client.writeWorkspaceFile({ path: 'plain.txt', content: 'stale', mode: 'replace', expectedHash: file.hash }, CLIENT),
    409,
    'hash_mismatch',
  );
  assert.equal(read('plain.txt'), 'two', 'a stale write changes nothing');
  const edited = await client.editWorkspaceFile(
    { path: 'plain.txt', oldText: 'two', newText: 'one', expectedHash: written.hash },
    CLIENT,
  );
  assert.equal(edited.replacements, 1);
  assert.equal(read('plain.txt'), 'one');
  const stat = await client.fileStat('plain.txt');
  assert.deepEqual([stat.type, stat.sizeBytes], ['file', 3]);
  const listing = await client.dirList('.');
  assert.deepEqual(listing.entries.map((e) => e.name), ['plain.txt']);
  const globbed = await client.glob('*.txt');
  assert.deepEqual(globbed.matches, ['plain.txt']);
  await rejectsWith(client.readWorkspaceFile('../outside.txt', {}, CLIENT), 400, 'path_outside_workspace');

  // The file is as the turn left it again: the rewind puts it back as before the turn (absent).
  const rewound = await client.rewindSession(sid, first.promptId, { clientId: CLIENT });
  assert.deepEqual(rewound, { rewound: true, targetTurnIndex: 0, filesChanged: ['plain.txt'], filesFailed: [] });
  assert.equal(fs.existsSync(path.join(WORKSPACE, 'plain.txt')), false);
  await rejectsWith(client.rewindSession(sid, 'no-such-prompt', { clientId: CLIENT }), 400, 'invalid_rewind_target');
});

function git(...args) {
  return execFileSync('git', args, {
    cwd: WORKSPACE,
    env: {
      ...process.env,
      GIT_CONFIG_GLOBAL: '/dev/null',
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_AUTHOR_NAME: 'e2e',
      GIT_AUTHOR_EMAIL: 'e2e@example.invalid',
      GIT_COMMITTER_NAME: 'e2e',
      GIT_COMMITTER_EMAIL: 'e2e@example.invalid',
    },
  }).toString();
}

/** Every byte of .git a daemon must leave alone (but the objects), the stash and the status. */
function repositoryState() {
  const out = {};
  const walk = (dir) => {
    for (const name of fs.readdirSync(dir)) {
      const p = path.join(dir, name);
      const rel = path.relative(path.join(WORKSPACE, '.git'), p);
      if (fs.statSync(p).isDirectory()) {
        if (rel !== 'objects') walk(p);
      } else {
        out[rel] = createHash('sha256').update(fs.readFileSync(p)).digest('hex');
      }
    }
  };
  walk(path.join(WORKSPACE, '.git'));
  out['(stash)'] = git('--no-optional-locks', 'stash', 'list');
  out['(status)'] = git('--no-optional-locks', 'status', '--porcelain=v2', '--untracked-files=all');
  return out;
}

test('a git repository: the diff against HEAD, a rewind, and the repository left as it was', async () => {
  fs.writeFileSync(path.join(WORKSPACE, 'tracked.txt'), 'one\ntwo\n');
  git('init', '-q', '-b', 'main');
  git('add', 'tracked.txt');
  git('commit', '-q', '-m', 'first');
  // Stat-dirty, same content: what `git status` would refresh in the index and write back.
  fs.writeFileSync(path.join(WORKSPACE, 'tracked.txt'), 'one\ntwo\n');
  const before = repositoryState();

  const clean = await client.workspaceGitDiff();
  assert.deepEqual([clean.available, clean.filesCount, clean.files], [true, 0, []], JSON.stringify(clean));
  const changed = await turn("run printf 'one\\nthree\\n' > tracked.txt && printf 'x\\n' > fresh.txt");
  const diff = await client.workspaceGitDiff();
  assert.deepEqual(
    diff.files.map((f) => [f.path, f.added, f.removed, f.isUntracked, f.isDeleted]),
    [
      ['fresh.txt', 1, 0, true, false],
      ['tracked.txt', 1, 1, false, false],
    ],
  );
  assert.deepEqual([diff.filesCount, diff.linesAdded, diff.linesRemoved, diff.hiddenCount], [2, 2, 1, 0]);
  const hunks = await client.workspaceGitDiffFile('tracked.txt');
  assert.deepEqual(hunks.hunks[0].lines, [' one', '-two', '+three']);
  const snapshots = (await client.getRewindSnapshots(sid)).snapshots;
  assert.equal(snapshots.at(-1).promptId, changed.promptId);
  assert.deepEqual(snapshots.at(-1).diffStats, { filesChanged: 2, insertions: 2, deletions: 1 });

  const rewound = await client.rewindSession(sid, changed.promptId, { clientId: CLIENT });
  assert.deepEqual(rewound.filesChanged, ['fresh.txt', 'tracked.txt']);
  assert.equal(read('tracked.txt'), 'one\ntwo\n');
  assert.equal((await client.workspaceGitDiff()).filesCount, 0);
  assert.deepEqual(repositoryState(), before, 'the user repository changed');
  await client.closeSession(sid, CLIENT);
});

test("over acp-ws: @qwen-code/sdk's file calls (its ACP transport's _qwen/file/*) answer as over REST", async () => {
  const transport = await negotiateTransport(BASE_URL);
  assert.equal(transport.type, 'acp-ws');
  const acp = new DaemonClient({ baseUrl: BASE_URL, transport, fetchTimeoutMs: T.request });
  try {
    fs.writeFileSync(path.join(WORKSPACE, 'acp.txt'), 'one\n');
    const file = await acp.readWorkspaceFile('acp.txt', {}, CLIENT);
    assert.equal(file.content, 'one\n');
    assert.deepEqual(file, await client.readWorkspaceFile('acp.txt', {}, CLIENT), 'the same answer as REST');
    const written = await acp.writeWorkspaceFile({ path: 'acp.txt', content: 'two\n', mode: 'replace', expectedHash: file.hash }, CLIENT);
    assert.equal(written.kind, 'file_write');
    assert.equal(read('acp.txt'), 'two\n');
    await rejectsWith(
      acp.writeWorkspaceFile({ path: 'acp.txt', content: 'stale', mode: 'replace', expectedHash: file.hash }, CLIENT),
      409,
      'hash_mismatch',
    );
    assert.equal(read('acp.txt'), 'two\n', 'a stale write changes nothing');
    const edited = await acp.editWorkspaceFile({ path: 'acp.txt', oldText: 'two', newText: 'three', expectedHash: written.hash }, CLIENT);
    assert.equal(edited.replacements, 1);
    assert.equal(read('acp.txt'), 'three\n');
    const stat = await acp.fileStat('acp.txt');
    assert.deepEqual([stat.type, stat.sizeBytes], ['file', 6]);
    const listing = await acp.dirList('.');
    assert.ok(listing.entries.some((e) => e.name === 'acp.txt'), JSON.stringify(listing));
    const globbed = await acp.glob('acp.*');
    assert.deepEqual(globbed.matches, ['acp.txt']);
    await rejectsWith(acp.readWorkspaceFile('../outside.txt', {}, CLIENT), 400, 'path_outside_workspace');
  } finally {
    transport.dispose();
    fs.rmSync(path.join(WORKSPACE, 'acp.txt'), { force: true });
  }
});
