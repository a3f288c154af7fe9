// The examples on the README's first screens, run as written against the
// default gateway (no key, no provider: the simulated model). They are read
// from README.md itself, so an example that stops working fails here. The
// one change made to them is the address: the gateway under test listens on
// a free port instead of localhost:8080.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { goCommand, repoRoot, startGateway } from '../lib/stack.mjs';

/** The fenced code blocks of README.md above its "## Routes" section, by language. */
function firstScreenExamples() {
  const readme = readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
  const end = readme.indexOf('\n## Routes');
  assert.ok(end > 0, 'README.md has a "## Routes" section');
  const blocks = {};
  for (const [, lang, code] of readme.slice(0, end).matchAll(/^```(\w+)\n([\s\S]*?)^```$/gm)) {
    (blocks[lang] ??= []).push(code);
  }
  return blocks;
}

const examples = firstScreenExamples();
const readmeURL = 'http://localhost:8080';
const helloAnswer = /You said: Hello/;

let gateway;
let workDir;

before(async () => {
  gateway = await startGateway();
  workDir = mkdtempSync(path.join(import.meta.dirname, '..', '.readme-'));
});

after(async () => {
  if (workDir) rmSync(workDir, { recursive: true, force: true });
  const stopped = await gateway?.stop();
  if (gateway) assert.deepEqual(stopped, { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${gateway.logs()}`);
});

/** The one example of lang that talks to the gateway's chat route (or, with
 * responses set, its Responses API), pointed at the gateway under test. */
function example(lang, responses = false) {
  const isResponses = (code) => /\/v1\/responses|\.responses\./.test(code);
  const found = (examples[lang] ?? []).filter((code) => code.includes(readmeURL) && isResponses(code) === responses);
  assert.equal(found.length, 1, `want one ${lang} example calling ${readmeURL} on the README's first screens, found ${found.length}`);
  return found[0].replaceAll(readmeURL, gateway.root);
}

/** Runs a command, returning its stdout; fails the test with its output when it fails. */
function runs(command, args, options = {}) {
  const res = spawnSync(command, args, { encoding: 'utf8', timeout: 120_000, ...options });
  if (res.error) throw res.error;
  assert.equal(res.status, 0, `${command} ${args.join(' ')} exited ${res.status}:\n${res.stdout}\n${res.stderr}`);
  return res.stdout;
}

test('the README starts the gateway the way these tests do', () => {
  const start = examples.sh?.[0] ?? '';
  assert.match(start, /^go run \.\/cmd\/phasegate\s/m, 'the first example starts the gateway with no configuration');
});

test('the curl example streams an answer', () => {
  const out = runs('bash', ['-c', example('sh')]);
  // A tool-less request is passed through: the chunks are the simulated
  // model's own bytes, whose keys are not in OpenAI's order.
  assert.match(out, /^data: \{.*"id":"chatcmpl-/m);
  assert.match(out, /^data: \[DONE\]$/m);
});

test('the Node example prints the answer, with no "Missing credentials"', () => {
  const file = path.join(workDir, 'example.mjs');
  writeFileSync(file, example('js'));
  // Run from e2e/, where the openai package is installed, on this Node.
  const out = runs(process.execPath, [file], { cwd: path.join(import.meta.dirname, '..'), env: { PATH: process.env.PATH ?? '' } });
  assert.match(out, helloAnswer);
});

test('the Python example prints the answer', (t) => {
  const probe = spawnSync('python3', ['-c', 'import openai'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    t.skip('python3 with the openai package is not installed');
    return;
  }
  const out = runs('python3', ['-c', example('python')], { env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' } });
  assert.match(out, helloAnswer);
});

test('the Go example prints the answer', () => {
  // Inside the module, so that go-openai resolves from its go.mod; a
  // directory starting with "." is left out of ./... patterns.
  const dir = path.join(workDir, 'goexample');
  mkdirSync(dir);
  writeFileSync(path.join(dir, 'main.go'), example('go'));
  const out = runs(goCommand(), ['run', '.'], { cwd: dir, env: { ...process.env, CGO_ENABLED: '0' } });
  assert.match(out, helloAnswer);
});

test('the Responses curl example answers with a response object', () => {
  const r = JSON.parse(runs('bash', ['-c', example('sh', true)]));
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.match(JSON.stringify(r.output), helloAnswer);
});

test('the Node Responses example continues a stored response', () => {
  const file = path.join(workDir, 'responses.mjs');
  writeFileSync(file, example('js', true));
  const out = runs(process.execPath, [file], { cwd: path.join(import.meta.dirname, '..'), env: { PATH: process.env.PATH ?? '' } });
  assert.match(out, /You said: And again/);
});
