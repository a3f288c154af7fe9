// Sessions under the official openai SDK, unmodified: an agent run that
// names its session (X-Session-Id, or the Responses API's prompt_cache_key
// with SESSION_FROM) is capped by tool calls, by tokens and by US dollars,
// and each time the run ends with an answer (the model offered no tools,
// after a notice) and the X-Phasegate-Session-Budget header naming the
// budget; another session is unaffected. The model is the built-in
// simulated coding agent (phasegate-sim-session: 20 tool calls, one a
// response, then an answer) of a gateway with no provider.

import assert from 'node:assert/strict';
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import OpenAI from 'openai';

import { startGateway } from '../lib/stack.mjs';

const model = 'phasegate-sim-session';
const budgetHeader = 'x-phasegate-session-budget';
const toolNames = ['list_files', 'search', 'read_file', 'run_tests', 'edit_file', 'git'];
const chatTools = toolNames.map((name) => ({ type: 'function', function: { name, parameters: { type: 'object' } } }));
const responseTools = toolNames.map((name) => ({ type: 'function', name, parameters: { type: 'object' } }));
// Prices of the simulated model: US dollars per million tokens.
const price = { miss: 100, hit: 10, output: 400 };

let byCalls; // SESSION_MAX_TOOL_CALLS=3, sessions also named by prompt_cache_key
let byHeaders; // no global budget; each session lowers its own by header; the model priced
let dir;

before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'phasegate-e2e-sessions-'));
  const config = path.join(dir, 'phasegate.yaml');
  writeFileSync(config, `prices:\n  ${model}: {input_cache_miss: ${price.miss}, input_cache_hit: ${price.hit}, output: ${price.output}}\n`);
  [byCalls, byHeaders] = await Promise.all([
    startGateway({ GUARD_PROFILE: 'agent', SESSION_MAX_TOOL_CALLS: '3', SESSION_FROM: 'prompt_cache_key' }),
    startGateway({ GUARD_PROFILE: 'agent', CONFIG: config }),
  ]);
});

after(async () => {
  const stopped = await Promise.all([byCalls?.stop(), byHeaders?.stop()]);
  for (const [i, g] of [byCalls, byHeaders].entries()) {
    if (g) assert.deepEqual(stopped[i], { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${g.logs()}`);
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function client(gateway) {
  return new OpenAI({ apiKey: 'sk-e2e-sessions', baseURL: `${gateway.root}/v1`, maxRetries: 0 });
}

/** One chat request, streamed or not: what the client read of it. */
async function chatOnce(c, messages, headers, stream) {
  if (!stream) {
    const { data, response } = await c.chat.completions.create({ model, messages, tools: chatTools }, { headers }).withResponse();
    const m = data.choices[0].message;
    return { content: m.content ?? '', toolCalls: m.tool_calls ?? [], budget: response.headers.get(budgetHeader), usage: data.usage };
  }
  const { data, response } = await c.chat.completions
    .create({ model, messages, tools: chatTools, stream: true, stream_options: { include_usage: true } }, { headers })
    .withResponse();
  let content = '';
  let usage;
  const toolCalls = [];
  for await (const chunk of data) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      content += ch.delta?.content ?? '';
      for (const d of ch.delta?.tool_calls ?? []) {
        toolCalls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
        const tc = toolCalls[d.index];
        if (d.id) tc.id = d.id;
        tc.function.name += d.function?.name ?? '';
        tc.function.arguments += d.function?.arguments ?? '';
      }
    }
  }
  return { content, toolCalls, budget: response.headers.get(budgetHeader), usage };
}

/** One user turn of the agent to its answer; the replies, the last the answer. */
async function chatTurn(gateway, headers, stream) {
  const c = client(gateway);
  const messages = [{ role: 'user', content: 'Fix the rounding bug.' }];
  const replies = [];
  for (let i = 0; i < 30; i++) {
    const r = await chatOnce(c, messages, headers, stream);
    replies.push(r);
    if (r.toolCalls.length === 0) return replies;
    messages.push({ role: 'assistant', content: null, tool_calls: r.toolCalls });
    for (const tc of r.toolCalls) messages.push({ role: 'tool', tool_call_id: tc.id, content: `result ${i} of ${tc.function.name}` });
  }
  assert.fail('no answer after 30 requests');
}

const calls = (replies) => replies.reduce((n, r) => n + r.toolCalls.length, 0);

/** The last reply is the session's forced final answer for budget after ran calls. */
function assertForcedFinal(replies, budget, ran) {
  const last = replies.at(-1);
  assert.equal(last.budget, budget, `the answer's ${budgetHeader}`);
  assert.match(last.content, /\*\*System Notice\*\*: session budget spent/);
  assert.match(last.content, new RegExp(`Final answer \\(simulated\\): stopped after ${ran} of 20 steps`));
  for (const r of replies.slice(0, -1)) assert.equal(r.budget, null, 'a reply before the cap names a budget');
}

for (const stream of [false, true]) {
  describe(`chat completions, stream=${stream}`, () => {
    test('a session capped by tool calls ends with an answer; another session is its own', async () => {
      const replies = await chatTurn(byCalls, { 'X-Session-Id': `calls-${stream}` }, stream);
      assert.equal(calls(replies), 3);
      assertForcedFinal(replies, 'SESSION_MAX_TOOL_CALLS', 3);
      const again = await chatTurn(byCalls, { 'X-Session-Id': `calls-${stream}` }, stream);
      assert.equal(again.length, 1, 'a later turn of the capped session is one answer');
      assertForcedFinal(again, 'SESSION_MAX_TOOL_CALLS', 0);
      const other = await chatTurn(byCalls, { 'X-Session-Id': `calls-other-${stream}` }, stream);
      assert.equal(other[0].toolCalls.length, 1, 'another session starts with its own budget');
    });

    test('a session capped by tokens ends with an answer', async () => {
      const replies = await chatTurn(byHeaders, { 'X-Session-Id': `tokens-${stream}`, 'X-Phasegate-Session-Max-Tokens': '1500' }, stream);
      const ran = calls(replies);
      assert.ok(ran > 0 && ran < 20, `${ran} tool calls before the budget stopped the session`);
      assertForcedFinal(replies, 'SESSION_MAX_TOKENS', ran);
    });

    test('a session capped by US dollars ends with an answer', async () => {
      const replies = await chatTurn(byHeaders, { 'X-Session-Id': `usd-${stream}`, 'X-Phasegate-Session-Max-Usd': '0.2' }, stream);
      const ran = calls(replies);
      assert.ok(ran > 0 && ran < 20, `${ran} tool calls before the budget stopped the session`);
      assertForcedFinal(replies, 'SESSION_MAX_USD', ran);
      // What the client was told it used, priced: the answer crossed the
      // budget, the requests before it did not.
      const cost = (rs) => rs.reduce((usd, r) => usd + (r.usage.prompt_tokens * price.miss + r.usage.completion_tokens * price.output) / 1e6, 0);
      assert.ok(cost(replies.slice(0, -1)) <= 0.2, `spent ${cost(replies.slice(0, -1))} before the answer`);
    });
  });
}

/** One Responses API request, streamed or not: the response object and its headers. */
async function responseOnce(c, body, headers, stream) {
  if (!stream) {
    const { data, response } = await c.responses.create(body, { headers }).withResponse();
    return { res: data, budget: response.headers.get(budgetHeader) };
  }
  const { data, response } = await c.responses.create({ ...body, stream: true }, { headers }).withResponse();
  let res;
  for await (const ev of data) {
    if (ev.type === 'response.completed') res = ev.response;
  }
  assert.ok(res, 'the stream ended without response.completed');
  return { res, budget: response.headers.get(budgetHeader) };
}

/**
 * One user turn on the Responses API to its answer, each response chained
 * to the last by previous_response_id; the replies as chatTurn gives them.
 */
async function responsesTurn(gateway, extra, headers, stream) {
  const c = client(gateway);
  let body = { model, input: 'Fix the rounding bug.', tools: responseTools, ...extra };
  const replies = [];
  for (let i = 0; i < 30; i++) {
    const { res, budget } = await responseOnce(c, body, headers, stream);
    const fc = res.output.filter((o) => o.type === 'function_call');
    // output_text is the SDK's on a created response only: read the
    // output items, as a streamed response holds them.
    const content = res.output.filter((o) => o.type === 'message').flatMap((o) => o.content).map((p) => p.text).join('');
    replies.push({ content, toolCalls: fc, budget, usage: res.usage });
    if (fc.length === 0) return replies;
    body = { model, previous_response_id: res.id, tools: responseTools, ...extra,
      input: fc.map((f) => ({ type: 'function_call_output', call_id: f.call_id, output: `result ${i}` })) };
  }
  assert.fail('no answer after 30 requests');
}

for (const stream of [false, true]) {
  describe(`the Responses API, stream=${stream}`, () => {
    test('a session named by prompt_cache_key is capped by tool calls', async () => {
      const replies = await responsesTurn(byCalls, { prompt_cache_key: `codex-conversation-${stream}` }, {}, stream);
      assert.equal(calls(replies), 3);
      assertForcedFinal(replies, 'SESSION_MAX_TOOL_CALLS', 3);
      assert.match(replies.at(-1).content, /session budget spent \(3 tool calls\)/);
    });

    test('a session capped by tokens ends with an answer', async () => {
      const replies = await responsesTurn(byHeaders, {}, { 'X-Session-Id': `rs-tokens-${stream}`, 'X-Phasegate-Session-Max-Tokens': '1500' }, stream);
      const ran = calls(replies);
      assert.ok(ran > 0 && ran < 20, `${ran} tool calls before the budget stopped the session`);
      assertForcedFinal(replies, 'SESSION_MAX_TOKENS', ran);
    });

    test('a session capped by US dollars ends with an answer', async () => {
      const replies = await responsesTurn(byHeaders, {}, { 'X-Session-Id': `rs-usd-${stream}`, 'X-Phasegate-Session-Max-Usd': '0.2' }, stream);
      const ran = calls(replies);
      assert.ok(ran > 0 && ran < 20, `${ran} tool calls before the budget stopped the session`);
      assertForcedFinal(replies, 'SESSION_MAX_USD', ran);
      const cost = (rs) => rs.reduce((usd, r) => usd + (r.usage.input_tokens * price.miss + r.usage.output_tokens * price.output) / 1e6, 0);
      assert.ok(cost(replies.slice(0, -1)) <= 0.2, `spent ${cost(replies.slice(0, -1))} before the answer`);
    });
  });
}
