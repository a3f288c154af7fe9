// Runs the examples of the documentation (README.md and docs/*.md) as
// written against a gateway under test, and checks what they print: the
// tests of e2e/test/readme.test.mjs and e2e/test/examples.test.mjs share
// it. Every fenced block that talks to http://localhost:8080 in a language
// run here (sh, js, python, go) is an example; the one change made to it
// is the address, the gateway's free port in place of localhost:8080. A
// Node example runs with a guard on fetch that records every URL it asks
// for and refuses any host but the gateway's, so an SDK that phones home
// (the Agents SDK's trace export) fails its example. The examples that
// start a coding agent's CLI are run by e2e/agents, which installs them.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { codeBlocks, pages } from './docs.mjs';
import { goCommand } from './stack.mjs';

export const docsURL = 'http://localhost:8080';
const helloAnswer = /You said: Hello/;
const e2eDir = path.join(import.meta.dirname, '..');

/** The coding-agent CLIs; e2e/agents, which installs them, runs their examples. */
export const agentCommands = ['claude', 'codex', 'qwen', 'opencode'];

/** The coding-agent CLI a shell block starts (a line's first word after VAR=value words), or undefined. */
export function agentOf(block) {
  if (block.lang !== 'sh') return undefined;
  for (const line of block.code.split('\n')) {
    const command = line.trim().split(/\s+/).find((word) => !/^\w+=/.test(word));
    if (agentCommands.includes(command)) return command;
  }
  return undefined;
}

/** The examples of the documentation in the languages langs, in page order, but those that start a coding agent. */
export function examples(...langs) {
  return pages()
    .flatMap(codeBlocks)
    .filter((b) => langs.includes(b.lang) && b.code.includes(docsURL) && !agentOf(b));
}

/** The examples of the documentation that start a coding agent, in page order. */
export function agentExamples() {
  return pages()
    .flatMap(codeBlocks)
    .filter((b) => b.code.includes(docsURL) && agentOf(b));
}

/** A place to run examples from, inside e2e/ (so that its packages resolve); remove() deletes it. */
export function workspace() {
  const dir = mkdtempSync(path.join(e2eDir, '.readme-'));
  writeFileSync(path.join(dir, 'fetch-guard.mjs'), fetchGuardSource);
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * Preloaded into every Node example: fetch writes each URL it is asked for to
 * $PHASEGATE_DOCS_FETCH_LOG and refuses any host but loopback.
 */
const fetchGuardSource = `import { appendFileSync } from 'node:fs';
const log = process.env.PHASEGATE_DOCS_FETCH_LOG;
const plain = globalThis.fetch;
globalThis.fetch = async function guardedFetch(input, init) {
  const req = input instanceof Request ? input : undefined;
  const url = new URL(req ? req.url : String(input));
  appendFileSync(log, (init?.method ?? req?.method ?? 'GET') + ' ' + url.href + '\\n');
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) {
    throw new TypeError('the example reached for ' + url.host + ', which is not the gateway');
  }
  return plain(input, init);
};
`;

/** Runs a command, returning its stdout; fails the test with its output when it fails. */
function runs(command, args, options = {}) {
  const res = spawnSync(command, args, { encoding: 'utf8', timeout: 120_000, ...options });
  if (res.error) throw res.error;
  assert.equal(res.status, 0, `${command} ${args.join(' ')} exited ${res.status}:\n${res.stdout}\n${res.stderr}`);
  return res.stdout;
}

/** The block's code pointed at the gateway under test. */
function pointed(block, gateway) {
  return block.code.replaceAll(docsURL, gateway.root);
}

/** Runs a Node example from e2e/ (where its packages are installed); returns its output and the URLs it fetched. */
function runNode(block, name, { gateway, dir }) {
  const file = path.join(dir, `${name}.mjs`);
  const fetchLog = path.join(dir, `${name}.fetches`);
  writeFileSync(file, pointed(block, gateway));
  writeFileSync(fetchLog, '');
  // OPENAI_API_KEY is set so that an SDK that would export to OpenAI with it
  // (the Agents SDK's tracing) tries to, and the guard sees it.
  const env = { PATH: process.env.PATH ?? '', OPENAI_API_KEY: 'sk-docs-not-a-key', PHASEGATE_DOCS_FETCH_LOG: fetchLog };
  const out = runs(process.execPath, ['--import', path.join(dir, 'fetch-guard.mjs'), file], { cwd: e2eDir, env });
  const fetched = readFileSync(fetchLog, 'utf8').split('\n').filter(Boolean);
  for (const line of fetched) assert.ok(line.includes(` ${gateway.root}/`), `${name} reached beyond the gateway: ${line}`);
  return { out, fetched };
}

/**
 * Runs a block from the workspace dir against gateway; returns its output
 * and, for Node, the URLs it fetched.
 */
export function runExample(block, name, { gateway, dir }) {
  switch (block.lang) {
    case 'sh': {
      // e2e's installed command-line clients come first on PATH.
      const env = { ...process.env, PATH: `${path.join(e2eDir, 'node_modules', '.bin')}${path.delimiter}${process.env.PATH ?? ''}` };
      return { out: runs('bash', ['-euo', 'pipefail', '-c', pointed(block, gateway)], { env }) };
    }
    case 'js':
      return runNode(block, name, { gateway, dir });
    case 'python':
      return { out: runs('python3', ['-c', pointed(block, gateway)], { env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' } }) };
    case 'go': {
      // Inside the module, so that go-openai resolves from its go.mod; a
      // directory starting with "." is left out of ./... patterns.
      const goDir = path.join(dir, name);
      mkdirSync(goDir);
      writeFileSync(path.join(goDir, 'main.go'), pointed(block, gateway));
      return { out: runs(goCommand(), ['run', '.'], { cwd: goDir, env: { ...process.env, CGO_ENABLED: '0' } }) };
    }
  }
  throw new Error(`no way to run ${block.lang}`);
}

/** Checks an example's output against what the simulated model answers it. */
export function checkOutput(block, { out, fetched = [] }) {
  const code = block.code;
  const paths = fetched.map((line) => new URL(line.split(' ')[1]).pathname);
  if (code.includes('previous_response_id')) {
    assert.match(out, /You said: And again/);
  } else if (block.lang === 'sh' && /\/v1\/responses\b/.test(code)) {
    const r = JSON.parse(out);
    assert.equal(r.object, 'response');
    assert.equal(r.status, 'completed');
    assert.match(JSON.stringify(r.output), helloAnswer);
  } else if (block.lang === 'sh' && /"stream":\s*true/.test(code)) {
    // A streamed answer ends with [DONE], and holds no error event.
    assert.match(out, /^data: \{.*"id":"chatcmpl-/m);
    assert.match(out, /^data: \[DONE\]$/m);
    assert.doesNotMatch(out, /^data: \{"error"/m);
  } else if (/Hello/.test(code)) {
    // One answer per call the example prints.
    const calls = Math.max(1, (code.match(/console\.log\(/g) ?? []).length);
    assert.equal((out.match(/You said: Hello/g) ?? []).length, calls, out);
  } else {
    assert.notEqual(out.trim(), '', 'the example printed nothing');
    assert.doesNotMatch(out, /"error"\s*:/);
  }
  if (code.includes('@ai-sdk/openai')) {
    // openai(model) speaks the Responses API, openai.chat(model) chat completions.
    assert.ok(paths.includes('/v1/responses'), paths.join(', '));
    assert.ok(paths.includes('/v1/chat/completions'), paths.join(', '));
  }
  if (code.includes('@openai/agents')) assert.deepEqual([...new Set(paths)], ['/v1/responses']);
  if (code.includes('@langchain/openai')) assert.deepEqual([...new Set(paths)], ['/v1/chat/completions']);
}
