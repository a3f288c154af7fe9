// The documentation itself: README.md's shape (short; what it is, then the
// two commands a newcomer runs; one example per client family; only
// installs that work), the docs/ pages it is split into, their links, and
// the examples that are not Node's (curl, Go, Python), run as written
// against the default gateway (lib/examples.mjs; the Node examples run in
// examples.test.mjs; those that start a coding agent in e2e/agents).

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { anchors, codeBlocks, pages, read, relativeLinks } from '../lib/docs.mjs';
import { agentOf, checkOutput, docsURL, examples, runExample, workspace } from '../lib/examples.mjs';
import { repoRoot, startGateway } from '../lib/stack.mjs';

/** The pages the documentation is split into; other branches write into them. */
const docPages = ['guard', 'doors', 'configuration', 'errors', 'operations', 'security', 'metrics', 'performance', 'development'].map(
  (name) => `docs/${name}.md`,
);

let gateway;
let ws;

before(async () => {
  gateway = await startGateway();
  ws = workspace();
});

after(async () => {
  ws?.remove();
  const stopped = await gateway?.stop();
  if (gateway) assert.deepEqual(stopped, { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${gateway.logs()}`);
});

describe('the examples of the documentation run as written', () => {
  for (const [i, block] of examples('sh', 'python', 'go').entries()) {
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
      checkOutput(block, runExample(block, `example${i}`, { gateway, dir: ws.dir }));
    });
  }
});

describe('the README', () => {
  const readme = read('README.md');
  const blocks = codeBlocks('README.md');

  test('is short: at most 300 lines', () => {
    const lines = readme.split('\n').length;
    assert.ok(lines <= 300, `README.md has ${lines} lines`);
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
      'Anthropic SDK': (b) => b.lang === 'js' && b.code.includes('from "@anthropic-ai/sdk"') && b.code.includes('messages.create'),
      'Claude Code': (b) => agentOf(b) === 'claude',
      Codex: (b) => agentOf(b) === 'codex',
      'Qwen Code': (b) => agentOf(b) === 'qwen',
      OpenCode: (b) => agentOf(b) === 'opencode',
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
    // The deployment's own page and the compose files' opening comments too.
    for (const page of [...pages(), 'deploy/README.md', 'deploy/compose.yaml', 'deploy/replicas/compose.yaml']) {
      const text = read(page);
      if (/docker compose /.test(text) || /docker-compose /.test(text)) {
        assert.ok(text.includes('docker compose') && text.includes('docker-compose'), `${page} names both docker compose (v2) and docker-compose (v1)`);
      }
    }
  });

  test('name the versions of every client CI runs, as pinned', () => {
    // The Clients table of docs/doors.md, up to the next section.
    const doors = read('docs/doors.md');
    const clients = doors.slice(doors.indexOf('## Clients'), doors.indexOf('\n## ', doors.indexOf('## Clients') + 1));
    const pinned = (file) => JSON.parse(read(file)).devDependencies;
    const notClients = ['ajv', 'ajv-formats', 'zod', 'node'];
    const missing = [];
    for (const file of ['e2e/package.json', 'e2e/agents/package.json']) {
      const deps = pinned(file);
      if (!clients.includes(`Node ${deps.node}`)) missing.push(`Node ${deps.node} (${file})`);
      for (const [pkg, version] of Object.entries(deps)) {
        if (!notClients.includes(pkg) && !clients.includes(`${pkg} ${version}`)) missing.push(`${pkg} ${version} (${file})`);
      }
    }
    for (const mod of ['github.com/sashabaranov/go-openai', 'github.com/anthropics/anthropic-sdk-go/v2']) {
      const version = read('go.mod').match(new RegExp(`^\\s*${mod.replaceAll('.', '\\.')} (v\\S+)`, 'm'))?.[1];
      const row = clients.split('\n').find((line) => line.includes(`\`${mod}\``));
      if (!version || !row?.includes(version)) missing.push(`${mod} ${version} (go.mod)`);
    }
    assert.deepEqual(missing, [], 'docs/doors.md, ## Clients: a client version CI runs is not named as pinned');
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
