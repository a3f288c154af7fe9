// History truncation (fitting a request to the model's window) with the official openai SDK: a 300k-token
// agent history goes through the gateway binary to the upstream double,
// which must receive it cut to the model's window in whole units, oldest
// first, and the SDK must get its answer. The double's "history" scenario
// answers with the o200k_base count of what it received, so "within
// budget" is checked with the gateway's own tokenizer, not a guess.
//
// The gateway also starts and counts offline: no tiktoken cache directory
// content, and proxies that refuse every connection.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import OpenAI from 'openai';

import { historySummary } from '../lib/fixtures.mjs';
import { startDouble, startGateway } from '../lib/stack.mjs';

const clientKey = 'sk-e2e-client-tokens';

// Models of the config file: e2e-agent has gpt-4o's limits, e2e-small a
// window too small for the system prompt of the too-long test.
const agentModel = 'e2e-agent';
const smallModel = 'e2e-small';
const configFile = `models:
  ${agentModel}:
    context_window: 128000
    completion_reserve: 16384
    safety_margin: 0.02
    encoding: o200k_base
  ${smallModel}:
    context_window: 4000
    encoding: o200k_base
`;

/** The most tokens a prompt may have: the window less the reserve, less the margin (learned ratio 1). */
const budgetOf = (window, reserve, margin) => Math.floor((window - Math.min(reserve, Math.floor(window / 2))) / (1 + margin));
const agentBudget = budgetOf(128_000, 16_384, 0.02);

const historyTokens = 300_000;
const marker = '…[phasegate: ';

// ---------------------------------------------------------------------------
// The agent history.

/** mulberry32: a small seeded generator, so every run sends the same history. */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const words = `the a of to and in is it for on with as that this be by from at are or an
repository function handler request response stream token budget window history message tool call result
error status config gateway upstream client model provider cache count limit agent turn phase guard
ledger signature schema test build deploy latency memory buffer event chunk delta index argument value
returns reads writes opens closes checks parses encodes decodes sends waits retries drops keeps fits`.split(/\s+/);

const pick = (r) => words[Math.floor(r() * words.length)];

function prose(r, n) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(pick(r) + (r() < 1 / 12 ? '.' : ''));
  return out.join(' ');
}

function code(r, lines) {
  let s = '';
  for (let i = 0; i < lines; i++) {
    const a = pick(r);
    const c = pick(r);
    switch (i % 4) {
      case 0:
        s += `func (h *${a}Handler) ${c[0].toUpperCase()}${c.slice(1)}${i}(ctx context.Context, n int) error {\n`;
        break;
      case 1:
        s += `\tif err := h.${a}.${c}(ctx, n+${Math.floor(r() * 1000)}); err != nil { return fmt.Errorf("${a} ${c}: %w", err) }\n`;
        break;
      case 2:
        s += `\t// ${prose(r, 12)}\n`;
        break;
      default:
        s += `\treturn nil // ${Math.floor(r() * 2 ** 20)}\n}\n`;
    }
  }
  return s;
}

const tools = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a file of the repository.',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
];

/**
 * An agent's history: a system prompt and a developer message, then per turn
 * a user message, a tool call with its result (every fourth one huge), two
 * parallel calls with their results and an answer, a system reminder every
 * tenth turn; then the current turn: the last user message and one executed
 * call with a huge result. Every message's text starts with "[mN] ", N its
 * position, so the double's copy can be mapped back.
 */
function agentHistory(turns) {
  const r = rng(42);
  const messages = [];
  const tag = (text) => `[m${messages.length}] ${text}`;
  const say = (role, text) => messages.push({ role, content: tag(text) });
  const call = (prefix, ...results) => {
    const toolCalls = results.map((_, i) => ({
      id: `call_${prefix}_${i}`,
      type: 'function',
      function: { name: 'read_file', arguments: JSON.stringify({ path: `src/${prefix}_${i}.go` }) },
    }));
    messages.push({ role: 'assistant', content: tag(prose(r, 15)), tool_calls: toolCalls });
    results.forEach((res, i) => messages.push({ role: 'tool', tool_call_id: toolCalls[i].id, content: tag(res) }));
  };
  say('system', 'You are a coding agent. ' + prose(r, 600));
  say('developer', 'Repository rules: ' + prose(r, 200));
  for (let turn = 0; turn < turns; turn++) {
    say('user', prose(r, 60));
    call(`${turn}_a`, code(r, turn % 4 === 1 ? 1200 : 220));
    call(`${turn}_b`, code(r, 60), prose(r, 300));
    say('assistant', prose(r, 150));
    if (turn % 10 === 9) say('system', 'Reminder: ' + prose(r, 40));
  }
  say('user', 'Now fix the failing test. ' + prose(r, 40));
  call('current', code(r, 1500));
  return messages;
}

const history = agentHistory(26);

/** The position a message carries, -1 for one the gateway added. */
function seqOf(m) {
  const found = /^\[m(\d+)\] /.exec(typeof m.content === 'string' ? m.content : '');
  return found ? Number(found[1]) : -1;
}

/**
 * Checks what the double received against what the SDK sent: order kept,
 * every system and developer message and the last user message kept, the
 * dropped ones the oldest of the rest, no tool result without its call and
 * no call without all its results. Returns the number of tool results
 * shortened.
 */
function checkHistory(sent, got) {
  const lastUser = sent.findLastIndex((m) => m.role === 'user');
  const kept = new Set();
  let prev = -1;
  let shortened = 0;
  got.forEach((m, i) => {
    const seq = seqOf(m);
    assert.ok(seq >= 0 && seq < sent.length, `upstream message ${i} is not one the client sent: ${JSON.stringify(m).slice(0, 120)}`);
    assert.ok(seq > prev, `upstream message ${i} is the client's ${seq}, after its ${prev}: order changed`);
    prev = seq;
    kept.add(seq);
    assert.equal(m.role, sent[seq].role, `upstream message ${i}: role`);
    if (m.content !== sent[seq].content) {
      assert.ok(m.role === 'tool' && m.content.includes(marker), `upstream message ${i} (client's ${seq}, ${m.role}) changed and is not a shortened tool result`);
      shortened++;
    }
  });
  let firstKept = -1;
  sent.forEach((m, i) => {
    const pinned = m.role === 'system' || m.role === 'developer' || i === lastUser;
    if (pinned) assert.ok(kept.has(i), `client message ${i} (${m.role}) was dropped; system, developer and the last user message must stay`);
    else if (kept.has(i) && firstKept < 0) firstKept = i;
    else if (!kept.has(i) && firstKept >= 0) assert.fail(`client message ${i} (${m.role}) was dropped after ${firstKept} was kept: the oldest must go first`);
  });
  const calls = new Set();
  const answered = new Set();
  got.forEach((m, i) => {
    if (m.role === 'assistant') for (const tc of m.tool_calls ?? []) calls.add(tc.id);
    if (m.role === 'tool') {
      assert.ok(calls.has(m.tool_call_id), `upstream message ${i}: orphaned tool result for ${m.tool_call_id}, whose call was dropped`);
      answered.add(m.tool_call_id);
    }
  });
  for (const id of calls) assert.ok(answered.has(id), `upstream history: call ${id} is there, its result was dropped`);
  return shortened;
}

// ---------------------------------------------------------------------------
// The stack.

/** A loopback port nothing listens on. */
async function closedPort() {
  const srv = createServer();
  await new Promise((resolve, reject) => srv.once('error', reject).listen(0, '127.0.0.1', resolve));
  const { port } = srv.address();
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

let double;
let dir;
let sentTokens; // the double's count of the whole history, sent to it directly

before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'phasegate-e2e-tokens-'));
  double = await startDouble();
  const direct = new OpenAI({ apiKey: clientKey, baseURL: double.baseURL, maxRetries: 0, timeout: 60_000 });
  const completion = await direct.chat.completions.create(
    { model: agentModel, messages: history, tools },
    { headers: { 'X-Test-Scenario': 'history', 'X-Request-Id': `e2e-tokens-direct-${randomUUID()}` } },
  );
  sentTokens = historySummary(completion.choices[0].message.content).prompt_tokens;
});

after(async () => {
  await double?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const client = (gateway, route) =>
  new OpenAI({ apiKey: clientKey, baseURL: `${gateway.root}/${route}`, maxRetries: 0, timeout: 60_000 });

/** Sends the history, streaming or not; returns the answer's content and the response. */
async function ask(c, model, messages, stream, id) {
  const { data, response } = await c.chat.completions
    .create({ model, messages, tools, stream }, { headers: { 'X-Test-Scenario': 'history', 'X-Request-Id': id } })
    .withResponse();
  if (!stream) return { content: data.choices[0].message.content, response };
  let content = '';
  for await (const chunk of data) content += chunk.choices[0]?.delta?.content ?? '';
  return { content, response };
}

/** The one request the double received with X-Request-Id id. */
async function receivedFor(id) {
  const got = await double.requests(id);
  assert.equal(got.length, 1, `the double received ${got.length} requests with id ${id}, want 1`);
  return got[0].body;
}

const headerInt = (response, name) => {
  const v = response.headers.get(name);
  assert.match(v ?? '', /^\d+$/, `${name} = ${v}, want a whole number`);
  return Number(v);
};

test(`the history is a ${historyTokens}-token one`, () => {
  assert.ok(sentTokens >= historyTokens && sentTokens <= historyTokens * 1.25, `history: ${sentTokens} tokens, want about ${historyTokens}`);
});

describe('a 300k-token history to a 128k model (config file models:)', () => {
  let gateway;
  before(async () => {
    const file = path.join(dir, 'phasegate.yaml');
    writeFileSync(file, configFile);
    gateway = await startGateway({ OPENAI_BASE_URL: double.baseURL, CONFIG: file });
  });
  after(async () => {
    const stopped = await gateway?.stop();
    if (gateway) assert.deepEqual(stopped, { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${gateway.logs()}`);
  });

  for (const route of ['v1', 'standard/v1']) {
    for (const stream of [false, true]) {
      test(`/${route}, stream=${stream}: the SDK gets its answer, the double a history within budget`, async () => {
        const id = `e2e-tokens-300k-${randomUUID()}`;
        const { content, response } = await ask(client(gateway, route), agentModel, history, stream, id);
        const summary = historySummary(content);

        // Within budget, by the double's o200k_base count.
        assert.ok(summary.prompt_tokens <= agentBudget, `the double got ${summary.prompt_tokens} tokens, want at most ${agentBudget}`);
        assert.ok(summary.prompt_tokens >= agentBudget * 0.75, `the double got ${summary.prompt_tokens} tokens of a ${agentBudget} budget: more dropped than needed`);
        assert.equal(headerInt(response, 'x-phasegate-prompt-tokens'), summary.prompt_tokens, 'X-Phasegate-Prompt-Tokens is the count the double made');

        const body = await receivedFor(id);
        assert.equal(body.messages.length, summary.messages);
        assert.ok(body.messages.length < history.length, `the double got ${body.messages.length} of ${history.length} messages, want fewer`);
        const shortened = checkHistory(history, body.messages);
        assert.equal(body.tools?.length, 1, "the client's tool reaches the double");
        // A rough count: the double's tokens must match the bytes it got
        // (code and English run 2 to 6 bytes a token), so its count is real.
        const bytesPerToken = JSON.stringify(body.messages).length / summary.prompt_tokens;
        assert.ok(bytesPerToken > 2 && bytesPerToken < 6, `${bytesPerToken.toFixed(2)} bytes a token`);

        assert.equal(headerInt(response, 'x-phasegate-dropped-messages'), history.length - body.messages.length);
        assert.ok(history.length - body.messages.length > 0);
        assert.equal(headerInt(response, 'x-phasegate-dropped-tokens'), sentTokens - summary.prompt_tokens);
        assert.equal(headerInt(response, 'x-phasegate-shortened-tool-results'), shortened);
        assert.ok(shortened >= 1, "the current turn's huge tool result is kept, shortened");
        assert.equal(response.headers.get('x-request-id'), id);
        assert.equal(response.headers.get('x-phasegate-protocol'), route === 'v1' ? 'two-stage' : 'standard');
      });
    }
  }

  for (const stream of [false, true]) {
    test(`stream=${stream}: a system prompt over the window is a 400 context_length_exceeded, before any upstream call`, async () => {
      const id = `e2e-tokens-too-long-${randomUUID()}`;
      const messages = [
        { role: 'system', content: prose(rng(7), 5_000) },
        { role: 'user', content: 'hi' },
      ];
      await assert.rejects(ask(client(gateway, 'v1'), smallModel, messages, stream, id), (err) => {
        assert.ok(err instanceof OpenAI.BadRequestError, `want BadRequestError, got ${err?.constructor?.name}: ${err}`);
        assert.equal(err.status, 400);
        assert.equal(err.code, 'context_length_exceeded');
        assert.equal(err.type, 'invalid_request_error');
        assert.equal(err.param, 'messages');
        return true;
      });
      assert.deepEqual(await double.requests(id), [], 'the double must receive nothing');
    });
  }
});

describe('offline start: empty TIKTOKEN_CACHE_DIR, proxies refusing, CONTEXT_WINDOW', () => {
  let gateway;
  let cacheDir;
  let tmp;
  before(async () => {
    cacheDir = mkdtempSync(path.join(dir, 'tiktoken-'));
    tmp = mkdtempSync(path.join(dir, 'tmp-'));
    const proxy = `http://127.0.0.1:${await closedPort()}`;
    gateway = await startGateway({
      OPENAI_BASE_URL: double.baseURL,
      CONTEXT_WINDOW: '64000',
      TIKTOKEN_CACHE_DIR: cacheDir,
      DATA_GYM_CACHE_DIR: cacheDir,
      TMPDIR: tmp,
      HTTP_PROXY: proxy,
      HTTPS_PROXY: proxy,
      http_proxy: proxy,
      https_proxy: proxy,
      NO_PROXY: '',
      no_proxy: '',
    });
  });
  after(async () => {
    await gateway?.stop();
  });

  test('the gateway starts, counts and truncates, and writes no cache', async () => {
    const id = `e2e-tokens-offline-${randomUUID()}`;
    const { content, response } = await ask(client(gateway, 'v1'), 'gpt-4o', history, false, id);
    const summary = historySummary(content);
    // CONTEXT_WINDOW replaces gpt-4o's 128k; its reserve and margin stay.
    const budget = budgetOf(64_000, 16_384, 0.02);
    assert.ok(summary.prompt_tokens <= budget, `the double got ${summary.prompt_tokens} tokens, want at most ${budget}`);
    assert.equal(headerInt(response, 'x-phasegate-prompt-tokens'), summary.prompt_tokens);
    assert.ok(headerInt(response, 'x-phasegate-dropped-messages') > 0);
    checkHistory(history, (await receivedFor(id)).messages);
    for (const d of [cacheDir, tmp]) assert.deepEqual(readdirSync(d), [], `${d} must stay empty`);
  });
});
