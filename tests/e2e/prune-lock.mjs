// Regenerate the lockfile with `npm install --package-lock-only && node prune-lock.mjs`.
//
// Why: @qwen-code/qwen-code declares optionalDependencies on platform packages that were never
// published (e.g. @teddyzhu/clipboard-darwin-arm64@0.0.5). Recent npm releases leave them out of the
// lockfile they write and then reject that very lockfile in `npm ci` ("Missing: ... from lock file",
// a known npm regression). This drops, from the lock entries' optionalDependencies, every optional
// dependency that has no entry of its own in the lock, so `npm ci` accepts it. Nothing else changes.
import fs from 'node:fs';
import path from 'node:path';

const file = path.join(path.dirname(new URL(import.meta.url).pathname), 'package-lock.json');
const lock = JSON.parse(fs.readFileSync(file, 'utf8'));
const keys = Object.keys(lock.packages);
const present = (entryPath, dep) => {
  // npm resolves a dependency of `entryPath` by walking up its node_modules chain.
  let dir = entryPath;
  for (;;) {
    if (keys.includes(`${dir ? dir + '/' : ''}node_modules/${dep}`)) return true;
    if (!dir) return false;
    const i = dir.lastIndexOf('/node_modules/');
    dir = i < 0 ? '' : dir.slice(0, i);
  }
};
let pruned = 0;
for (const [entryPath, entry] of Object.entries(lock.packages)) {
  const opt = entry.optionalDependencies;
  if (!opt) continue;
  for (const dep of Object.keys(opt)) {
    if (!present(entryPath, dep)) {
      delete opt[dep];
      pruned++;
      console.log(`pruned unpublished optional dependency ${dep} of ${entryPath || '(root)'}`);
    }
  }
  if (Object.keys(opt).length === 0) delete entry.optionalDependencies;
}
fs.writeFileSync(file, JSON.stringify(lock, null, 2) + '\n');
console.log(`${pruned} entries pruned`);
