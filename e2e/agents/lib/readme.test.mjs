// The documentation's examples that start a coding agent (README.md's
// Claude Code, Codex, Qwen Code and OpenCode blocks), run as written: each
// against a gateway started with no configuration (its simulated model),
// with the CLI this lockfile installs first on PATH, in a HOME and a
// project directory of their own and with npm offline (OpenCode would
// otherwise fetch its plugin SDK from the registry at start). The only
// change made to a block is the gateway's address in place of
// localhost:8080. Each must exit 0 having shown the simulated model's
// answer. The other examples run in e2e/test/.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { agentExamples, agentOf, docsURL } from '../../lib/examples.mjs';
import { startGateway } from '../../lib/stack.mjs';

const binDir = path.join(import.meta.dirname, '..', 'node_modules', '.bin');
const timeoutMs = 180_000;

let gateway;
let scratch;

before(async () => {
  gateway = await startGateway();
  scratch = mkdtempSync(path.join(tmpdir(), 'phasegate-agents-docs-'));
});

after(async () => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
  await gateway?.stop();
});

describe('the coding agents of the documentation run as written', () => {
  const blocks = agentExamples();
  test('there is one for every agent', () => {
    assert.deepEqual([...new Set(blocks.map(agentOf))].sort(), ['claude', 'codex', 'opencode', 'qwen']);
  });
  for (const [i, block] of blocks.entries()) {
    test(`${block.page}:${block.line} ${agentOf(block)}`, { timeout: timeoutMs + 10_000 }, () => {
      const home = path.join(scratch, `home${i}`);
      const project = path.join(scratch, `project${i}`);
      mkdirSync(home);
      mkdirSync(project);
      writeFileSync(path.join(project, 'README.md'), 'A project.\n');
      const res = spawnSync('bash', ['-euo', 'pipefail', '-c', block.code.replaceAll(docsURL, gateway.root)], {
        cwd: project,
        encoding: 'utf8',
        timeout: timeoutMs,
        env: { PATH: `${binDir}${path.delimiter}${process.env.PATH ?? ''}`, HOME: home, npm_config_offline: 'true' },
      });
      const shown = `stdout:\n${res.stdout?.slice(-2000)}\nstderr:\n${res.stderr?.slice(-2000)}`;
      assert.equal(res.error, undefined, `${res.error}\n${shown}`);
      assert.equal(res.status, 0, `exit ${res.status} (${res.signal})\n${shown}`);
      assert.match(res.stdout, /Simulated answer|simulated model/, `the simulated model's answer is not shown\n${shown}`);
    });
  }
});
