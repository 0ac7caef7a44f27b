// Installs the BullMQ versions the Go tests of reclaim/bullmq run a real
// worker of: each folder here named bullmq<major> pins one major in its
// package.json and package-lock.json.
//
// usage: node install.mjs [folder...]
//
// With no folder, every bullmq<major> folder beside this script. A folder is
// installed with `npm ci` only when its node_modules was not installed from
// the lock file it has now: a successful install leaves the lock file's hash
// in node_modules, so a run that finds it skips npm altogether, and a lock
// file that changed (or an install cut short, which leaves no hash) is
// installed again from scratch.
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const stamp = join('node_modules', '.installed-lock-sha256');

let folders = process.argv.slice(2);
if (folders.length === 0) {
  folders = readdirSync(here).filter((f) => /^bullmq\d+$/.test(f)).sort();
}

for (const folder of folders) {
  const dir = join(here, folder);
  const lock = join(dir, 'package-lock.json');
  if (!existsSync(lock)) {
    console.error(`install.mjs: ${lock} does not exist`);
    process.exit(1);
  }
  const sum = createHash('sha256').update(readFileSync(lock)).digest('hex');
  const installed = join(dir, stamp);
  if (existsSync(installed) && readFileSync(installed, 'utf8') === sum) continue;
  execFileSync('npm', ['ci', '--no-audit', '--no-fund'], {
    cwd: dir,
    stdio: ['ignore', 'inherit', 'inherit'],
    shell: process.platform === 'win32',
  });
  writeFileSync(installed, sum);
}
