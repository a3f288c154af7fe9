// Runs the real-client tests: builds the gateway and the upstream double
// once into a temporary directory, then runs every test/*.test.mjs file with
// Node's built-in test runner under this same Node (22 or later, which the
// openai SDK needs; `npm test` picks the one the `node` devDependency
// installs). Extra arguments go to `node --test`, e.g.
//   npm test -- --test-name-pattern=rate
// Exits with the test runner's status.

import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { buildBinaries } from './lib/stack.mjs';

const major = Number(process.versions.node.split('.')[0]);
if (major < 22) {
  console.error(`e2e: Node ${process.version} is too old (the openai SDK needs 22+); run \`npm test\` in e2e/, which uses the pinned node devDependency`);
  process.exit(2);
}

const dir = mkdtempSync(path.join(tmpdir(), 'phasegate-e2e-bin-'));
let status = 1;
try {
  const started = Date.now();
  buildBinaries(dir);
  console.log(`e2e: built phasegate and upstreamdouble in ${Date.now() - started} ms; Node ${process.version}`);
  // The timeout bounds each test file's process as well as each test: the
  // file that runs every example of the documentation grows with the pages.
  const args = ['--test', '--test-reporter=spec', '--test-timeout=240000', ...process.argv.slice(2), 'test/*.test.mjs'];
  const res = spawnSync(process.execPath, args, {
    cwd: import.meta.dirname,
    stdio: 'inherit',
    env: { ...process.env, PHASEGATE_E2E_BIN_DIR: dir },
  });
  if (res.error) throw res.error;
  status = res.status ?? 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
process.exit(status);
