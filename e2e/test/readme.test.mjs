// The examples of the documentation, run as written against the default
// gateway (no key, no provider: the simulated model). They are read from
// README.md and docs/*.md themselves, so an example that stops working fails
// here: every fenced block that talks to http://localhost:8080 in a language
// this test runs (sh, js, python, go) is run, and must succeed and print
// what the simulated model answers. The one change made to them is the
// address: the gateway under test listens on a free port instead of
// localhost:8080. A Node example runs with a guard on fetch that records
// every URL it asks for and refuses any host but the gateway's, so an SDK
// that phones home (the Agents SDK's trace export) fails its example.
//
// The README's shape is checked too: short, what it is and the two
// commands first, one example per client family, only installs that work;
// and every relative link of every page leads to a file and heading that
// exist.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { anchors, codeBlocks, pages, read, relativeLinks } from '../lib/docs.mjs';
import { goCommand, repoRoot, startGateway } from '../lib/stack.mjs';

const docsURL = 'http://localhost:8080';
const helloAnswer = /You said: Hello/;
const e2eDir = path.join(import.meta.dirname, '..');

/** The pages the documentation is split into; other branches write into them. */
const docPages = ['guard', 'doors', 'configuration', 'errors', 'operations', 'security', 'metrics', 'performance', 'development'].map(
  (name) => `docs/${name}.md`,
);

/** Blocks this test runs: those talking to the documented gateway, in a language it runs. */
const runnable = pages()
  .flatMap(codeBlocks)
  .filter((b) => ['sh', 'js', 'python', 'go'].includes(b.lang) && b.code.includes(docsURL));

let gateway;
let workDir;
let fetchGuard;

before(async () => {
  gateway = await startGateway();
  workDir = mkdtempSync(path.join(e2eDir, '.readme-'));
  fetchGuard = path.join(workDir, 'fetch-guard.mjs');
  writeFileSync(fetchGuard, fetchGuardSource);
});

after(async () => {
  if (workDir) rmSync(workDir, { recursive: true, force: true });
  const stopped = await gateway?.stop();
  if (gateway) assert.deepEqual(stopped, { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${gateway.logs()}`);
});

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
function pointed(block) {
  return block.code.replaceAll(docsURL, gateway.root);
}

/** Runs a Node example from e2e/ (where its packages are installed); returns its output and the URLs it fetched. */
function runNode(block, name) {
  const file = path.join(workDir, `${name}.mjs`);
  const fetchLog = path.join(workDir, `${name}.fetches`);
  writeFileSync(file, pointed(block));
  writeFileSync(fetchLog, '');
  // OPENAI_API_KEY is set so that an SDK that would export to OpenAI with it
  // (the Agents SDK's tracing) tries to, and the guard sees it.
  const env = { PATH: process.env.PATH ?? '', OPENAI_API_KEY: 'sk-docs-not-a-key', PHASEGATE_DOCS_FETCH_LOG: fetchLog };
  const out = runs(process.execPath, ['--import', fetchGuard, file], { cwd: e2eDir, env });
  const fetched = readFileSync(fetchLog, 'utf8').split('\n').filter(Boolean);
  for (const line of fetched) assert.ok(line.includes(` ${gateway.root}/`), `${name} reached beyond the gateway: ${line}`);
  return { out, fetched };
}

/** Runs a block; returns its output and, for Node, the URLs it fetched. */
function run(block, name) {
  switch (block.lang) {
    case 'sh': {
      // e2e's installed command-line clients come first on PATH.
      const env = { ...process.env, PATH: `${path.join(e2eDir, 'node_modules', '.bin')}${path.delimiter}${process.env.PATH ?? ''}` };
      return { out: runs('bash', ['-euo', 'pipefail', '-c', pointed(block)], { env }) };
    }
    case 'js':
      return runNode(block, name);
    case 'python':
      return { out: runs('python3', ['-c', pointed(block)], { env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' } }) };
    case 'go': {
      // Inside the module, so that go-openai resolves from its go.mod; a
      // directory starting with "." is left out of ./... patterns.
      const dir = path.join(workDir, name);
      mkdirSync(dir);
      writeFileSync(path.join(dir, 'main.go'), pointed(block));
      return { out: runs(goCommand(), ['run', '.'], { cwd: dir, env: { ...process.env, CGO_ENABLED: '0' } }) };
    }
  }
  throw new Error(`no way to run ${block.lang}`);
}

/** Checks an example's output against what the simulated model answers it. */
function checkOutput(block, { out, fetched = [] }) {
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

describe('the examples of the documentation run as written', () => {
  for (const [i, block] of runnable.entries()) {
    const first = block.code.split('\n')[0].slice(0, 60);
    test(`${block.page}:${block.line} (${block.lang}) ${first}`, (t) => {
      if (block.lang === 'python') {
        // The SDK the example imports (openai, anthropic).
        const sdk = block.code.match(/^import (\w+)/m)?.[1] ?? 'openai';
        const probe = spawnSync('python3', ['-c', `import ${sdk}`], { encoding: 'utf8' });
        if (probe.error || probe.status !== 0) {
          t.skip(`python3 with the ${sdk} package is not installed`);
          return;
        }
      }
      checkOutput(block, run(block, `example${i}`));
    });
  }
});

describe('the README', () => {
  const readme = read('README.md');
  const blocks = codeBlocks('README.md');

  test('is short: under 400 lines', () => {
    const lines = readme.split('\n').length;
    assert.ok(lines < 400, `README.md has ${lines} lines`);
  });

  test('says what it is, then shows the two commands a newcomer runs', () => {
    const firstHeading = readme.search(/^## /m);
    const first = blocks[0];
    assert.ok(first && readme.split('\n').slice(0, first.line).join('\n').length < firstHeading, 'the first code block comes before the first section');
    assert.match(readme.split('\n').slice(1, first.line - 1).join(' '), /gateway/, 'a paragraph says what it is before the commands');
    assert.equal(first.lang, 'sh');
    const lines = first.code.trim().split('\n');
    assert.equal(lines.length, 2, first.code);
    assert.match(lines[0], /^go run \.\/cmd\/phasegate\s+#.*simulated/, 'the gateway on its simulated model, as these tests start it');
    assert.match(lines[1], /^bash \.ci\/run\s+#.*go test/, 'CI, with the test command it runs');
  });

  test('offers only the installs that work', () => {
    for (const page of pages()) {
      assert.doesNotMatch(read(page), /go install github\.com\/phasegate\//, `${page}: the module path is not published`);
    }
    assert.match(readme, /go install \.\/cmd\/phasegate/);
    assert.match(readme, /make release/);
    assert.match(readme, /docker build/);
  });

  test('shows one example per client family', () => {
    const examples = blocks.filter((b) => b.code.includes(docsURL));
    const families = {
      'curl, chat': (b) => b.lang === 'sh' && b.code.includes('/v1/chat/completions'),
      'curl, Responses': (b) => b.lang === 'sh' && b.code.includes('/v1/responses'),
      'openai (npm), chat': (b) => b.lang === 'js' && b.code.includes('from "openai"') && b.code.includes('chat.completions.create') && !b.code.includes('@openai/agents'),
      'openai (npm), Responses': (b) => b.lang === 'js' && b.code.includes('responses.create'),
      'OpenAI Agents SDK': (b) => b.lang === 'js' && b.code.includes('@openai/agents'),
      'AI SDK, openai(model) and openai.chat(model)': (b) => b.lang === 'js' && /openai\("/.test(b.code) && /openai\.chat\("/.test(b.code),
      LangChain: (b) => b.lang === 'js' && b.code.includes('@langchain/openai'),
      'openai (Python)': (b) => b.lang === 'python' && b.code.includes('from openai import OpenAI'),
      'go-openai': (b) => b.lang === 'go' && b.code.includes('github.com/sashabaranov/go-openai'),
    };
    for (const [family, is] of Object.entries(families)) {
      assert.equal(examples.filter(is).length, 1, `want one ${family} example calling ${docsURL} in README.md`);
    }
  });

  test('turns the Agents SDK trace export off in its example', () => {
    const agents = blocks.find((b) => b.code.includes('@openai/agents'));
    assert.match(agents.code, /setTracingDisabled\(true\)/);
  });

  test('links every docs page', () => {
    for (const page of docPages) assert.ok(readme.includes(`](${page})`), `README.md links ${page}`);
  });
});

describe('the docs pages', () => {
  test('are the ones the documentation is split into', () => {
    for (const page of docPages) assert.ok(existsSync(path.join(repoRoot, page)), `${page} exists`);
  });

  test('every relative link leads to a file, and an anchor to a heading of it', () => {
    const broken = [];
    for (const page of pages()) {
      for (const { line, target } of relativeLinks(page)) {
        const [file, anchor] = target.split('#');
        const to = file === '' ? page : path.relative(repoRoot, path.resolve(repoRoot, path.dirname(page), file));
        if (!existsSync(path.join(repoRoot, to))) {
          broken.push(`${page}:${line}: ${target}: no file ${to}`);
        } else if (anchor !== undefined && to.endsWith('.md') && !anchors(to).has(anchor)) {
          broken.push(`${page}:${line}: ${target}: no heading #${anchor} in ${to}`);
        }
      }
    }
    assert.deepEqual(broken, []);
  });

  test('name Compose both ways wherever they show one', () => {
    for (const page of pages()) {
      const text = read(page);
      if (/docker compose /.test(text) || /docker-compose /.test(text)) {
        assert.ok(text.includes('docker compose') && text.includes('docker-compose'), `${page} names both docker compose (v2) and docker-compose (v1)`);
      }
    }
  });

  test('leave test names and go test commands to docs/development.md', () => {
    const userPages = pages().filter((p) => p !== 'docs/development.md');
    const found = [];
    for (const page of userPages) {
      read(page)
        .split('\n')
        .forEach((line, i) => {
          if (/`go test [^`]+`|go test -|`(Test|Benchmark|Fuzz)[A-Z]\w*`|go run \.\/cmd\/phasegate-(bench|load)/.test(line) && !/bash \.ci\/run/.test(line)) found.push(`${page}:${i + 1}: ${line.trim().slice(0, 100)}`);
        });
    }
    assert.deepEqual(found, []);
  });
});
