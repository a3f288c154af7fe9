// Anthropic's Messages API (POST /v1/messages, count_tokens, the model list)
// under real clients, unmodified: the @anthropic-ai/sdk's messages.create,
// messages.stream and its tool runner, and the AI SDK's Anthropic provider
// with generateText and streamText. Each client takes the gateway's root (or
// its /standard route) where it would take api.anthropic.com.
//
// On the simulated looping model every agent client ends with an answer and
// one tool execution through the guarded route, and loops to its own step
// limit on /standard, as the chat and Responses clients do. The SDK's tool
// runner asks the server to hold the conversation (a message thread); the
// gateway holds none and answers a continued thread thread_not_found, on
// which the runner sends the whole conversation again.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import { betaTool } from '@anthropic-ai/sdk/helpers/beta/json-schema';
import { createAnthropic } from '@ai-sdk/anthropic';
import { generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';

import * as want from '../lib/fixtures.mjs';
import { startDouble, startGateway } from '../lib/stack.mjs';

const looping = 'phasegate-sim-looping';
// The agent clients' own step limit.
const maxSteps = 6;
const clientKey = 'sk-e2e-messages-client-5b8e1d37';
const gatewayKey = 'sk-e2e-messages-gw-0a4c9e62';
const prompt = 'What is the weather in Paris?';

let sim; // a gateway with no provider, the simulated models, and a client key
let double;
let proxied; // a gateway in front of the upstream double, as DeepSeek

before(async () => {
  double = await startDouble();
  [sim, proxied] = await Promise.all([
    startGateway({ PHASEGATE_API_KEYS: clientKey }),
    startGateway({ DEEPSEEK_BASE_URL: double.baseURL, DEEPSEEK_API_KEY: gatewayKey }),
  ]);
});

after(async () => {
  const stopped = await Promise.all([sim?.stop(), proxied?.stop()]);
  await double?.stop();
  for (const [i, g] of [sim, proxied].entries()) {
    if (!g) continue;
    assert.deepEqual(stopped[i], { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${g.logs()}`);
    for (const key of [clientKey, gatewayKey]) assert.ok(!g.logs().includes(key), `the gateway logs the key ${key}`);
  }
});

const client = (route = '', options = {}) =>
  new Anthropic({ apiKey: clientKey, baseURL: `${sim.root}${route}`, maxRetries: 0, timeout: 20_000, ...options });

const weatherTool = {
  name: 'get_weather',
  description: 'Weather forecast for a city.',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

const toolUses = (message) => message.content.filter((b) => b.type === 'tool_use');
const textOf = (message) => message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

/** Tool executions, in order: the agents' tools record what they ran. */
function counter() {
  const runs = [];
  return { runs, run: (name, args) => (runs.push(`${name}${JSON.stringify(args)}`), `Sunny, 21 °C (${runs.length})`) };
}

describe('@anthropic-ai/sdk, messages.create and messages.stream', () => {
  test('create: thinking and text, an id, usage, the dropped fields named', async () => {
    const { data: msg, response } = await client()
      .messages.create({
        model: 'phasegate-sim',
        max_tokens: 256,
        system: [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }],
        messages: [{ role: 'user', content: 'hello sim' }],
      })
      .withResponse();
    assert.equal(response.headers.get('x-phasegate-provider'), 'simulated');
    assert.equal(response.headers.get('x-phasegate-dropped'), 'cache_control');
    assert.match(msg.id, /^msg_/);
    assert.equal(msg.type, 'message');
    assert.equal(msg.role, 'assistant');
    assert.equal(msg.model, 'phasegate-sim');
    assert.deepEqual(msg.content.map((b) => b.type), ['thinking', 'text']);
    assert.ok(msg.content[0].signature, 'a thinking block is signed');
    assert.match(textOf(msg), /You said: hello sim$/);
    assert.equal(msg.stop_reason, 'end_turn');
    assert.ok(msg.usage.input_tokens > 0 && msg.usage.output_tokens > 0, JSON.stringify(msg.usage));
  });

  test('stream: the events accumulate into the message create answers', async () => {
    const params = { model: 'phasegate-sim', max_tokens: 256, messages: [{ role: 'user', content: 'hello stream' }] };
    const stream = client().messages.stream(params);
    const events = [];
    stream.on('streamEvent', (e) => events.push(e.type));
    let text = '';
    stream.on('text', (t) => (text += t));
    const final = await stream.finalMessage();
    const whole = await client().messages.create(params);
    assert.equal(events[0], 'message_start');
    assert.equal(events.at(-1), 'message_stop');
    assert.ok(events.includes('content_block_delta') && events.includes('message_delta'), events.join(' '));
    assert.equal(text, textOf(final));
    assert.deepEqual(final.content.map((b) => b.type), whole.content.map((b) => b.type));
    assert.equal(textOf(final), textOf(whole));
    assert.equal(final.stop_reason, whole.stop_reason);
    assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  });

  for (const stream of [false, true]) {
    test(`${stream ? 'stream' : 'create'}: a tool round trip, thinking sent back`, async () => {
      const c = client();
      const send = (messages) => {
        const params = { model: 'phasegate-sim', max_tokens: 1024, tools: [weatherTool], thinking: { type: 'enabled', budget_tokens: 1024 }, messages };
        return stream ? c.messages.stream(params).finalMessage() : c.messages.create(params);
      };
      const messages = [{ role: 'user', content: prompt }];
      const first = await send(messages);
      assert.equal(first.stop_reason, 'tool_use');
      const [call] = toolUses(first);
      assert.equal(call.name, 'get_weather');
      assert.deepEqual(call.input, { city: 'example' });
      assert.equal(first.content[0].type, 'thinking');
      messages.push({ role: 'assistant', content: first.content });
      messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'Sunny, 21 °C' }] });
      const second = await send(messages);
      assert.equal(second.stop_reason, 'end_turn');
      assert.equal(toolUses(second).length, 0);
      assert.match(textOf(second), /Sunny, 21 °C/);
    });
  }

  test('a thinking block sent back reaches DeepSeek as reasoning_content', async () => {
    const c = new Anthropic({ apiKey: 'sk-e2e-own', baseURL: proxied.root, maxRetries: 0 });
    const model = 'deepseek-e2e';
    const first = await c.messages.create(
      { model, max_tokens: 256, messages: [{ role: 'user', content: 'check this' }] },
      { headers: { 'X-Test-Scenario': 'reasoning' } },
    );
    assert.deepEqual(first.content.map((b) => [b.type, b.thinking ?? b.text]), [
      ['thinking', want.reasoning],
      ['text', want.reasoningAnswer],
    ]);
    const id = `e2e-messages-${randomUUID()}`;
    await c.messages.create(
      { model, max_tokens: 256, messages: [{ role: 'user', content: 'check this' }, { role: 'assistant', content: first.content }, { role: 'user', content: 'again' }] },
      { headers: { 'X-Test-Scenario': 'text', 'X-Request-Id': id } },
    );
    const [upstream] = await double.requests(id);
    const assistant = upstream.body.messages.find((m) => m.role === 'assistant');
    assert.equal(assistant.reasoning_content, want.reasoning, JSON.stringify(upstream.body.messages));
    assert.equal(upstream.header['Anthropic-Version'], undefined, 'anthropic-version stays at the gateway');
    assert.equal(upstream.header.Authorization?.[0], `Bearer ${gatewayKey}`);
  });

  test('countTokens and models.list, a wrong key refused as Anthropic refuses it', async () => {
    const short = await client().messages.countTokens({ model: 'phasegate-sim', messages: [{ role: 'user', content: 'hi' }] });
    const long = await client().messages.countTokens({ model: 'phasegate-sim', tools: [weatherTool], messages: [{ role: 'user', content: 'the weather in Paris '.repeat(100) }] });
    assert.ok(short.input_tokens > 0 && long.input_tokens > short.input_tokens + 400, `${short.input_tokens} ${long.input_tokens}`);
    const ids = [];
    for await (const m of client().models.list()) ids.push(m.id);
    assert.ok(ids.includes(looping), ids.join(' '));
    assert.equal((await client().models.retrieve(looping)).type, 'model');
    await assert.rejects(
      client('', { apiKey: 'sk-e2e-wrong' }).messages.create({ model: 'phasegate-sim', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
      (err) => err instanceof Anthropic.AuthenticationError && err.status === 401 && err.error?.error?.type === 'authentication_error',
    );
  });
});

describe('@anthropic-ai/sdk, the tool runner', () => {
  async function runTools(route, stream) {
    const ws = counter();
    const tools = ['get_weather', 'get_time'].map((name) =>
      betaTool({
        name,
        description: `${name} of a city.`,
        inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        run: async (args) => ws.run(name, args),
      }),
    );
    const runner = client(route).beta.messages.toolRunner({
      model: looping,
      max_tokens: 1024,
      max_iterations: maxSteps,
      stream,
      tools,
      messages: [{ role: 'user', content: prompt }],
    });
    let last;
    let turns = 0;
    for await (const item of runner) {
      turns++;
      last = stream ? await item.finalMessage() : item;
    }
    return { last, turns, runs: ws.runs };
  }

  for (const stream of [false, true]) {
    test(`${stream ? 'streamed' : 'whole'}, guarded: an answer after one tool execution`, async () => {
      const { last, turns, runs } = await runTools('', stream);
      assert.equal(runs.length, 1, JSON.stringify(runs));
      assert.equal(turns, 2);
      assert.equal(last.stop_reason, 'end_turn');
      assert.match(textOf(last), /Final answer \(simulated\)/);
      assert.match(textOf(last), /System Notice/, 'the repeat was refused: the whole conversation reached the guard');
    });
  }

  test('standard route: the loop runs to max_iterations', async () => {
    const { last, turns, runs } = await runTools('/standard', false);
    assert.equal(turns, maxSteps);
    assert.ok(runs.length >= maxSteps, `${runs.length} executions`);
    assert.equal(last.stop_reason, 'tool_use');
  });
});

describe('AI SDK, the Anthropic provider', () => {
  async function runSteps(route, stream, extra = {}) {
    const ws = counter();
    const provider = createAnthropic({ apiKey: clientKey, baseURL: `${sim.root}${route}/v1` });
    const params = jsonSchema({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] });
    const tools = Object.fromEntries(['get_weather', 'get_time'].map((name) => [name, tool({ inputSchema: params, execute: async (args) => ws.run(name, args) })]));
    const opts = { model: provider(looping), prompt, tools, stopWhen: stepCountIs(maxSteps), maxOutputTokens: 1024, maxRetries: 0, ...extra };
    if (!stream) {
      const r = await generateText(opts);
      return { text: r.text, steps: r.steps, runs: ws.runs };
    }
    let failure;
    const s = streamText({ ...opts, onError: ({ error }) => (failure = error) });
    const r = { text: await s.text, steps: await s.steps, runs: ws.runs };
    if (failure) throw failure;
    return r;
  }

  for (const stream of [false, true]) {
    const how = stream ? 'streamText' : 'generateText';
    test(`${how}, guarded: an answer after one tool execution`, async () => {
      const { text, steps, runs } = await runSteps('', stream);
      assert.match(text, /Final answer \(simulated\)/);
      assert.equal(runs.length, 1, JSON.stringify(runs));
      assert.equal(steps.length, 2);
    });

    test(`${how}, thinking: the reasoning of every step, sent back with its signature`, async () => {
      const thinking = { providerOptions: { anthropic: { thinking: { type: 'enabled', budgetTokens: 1024 } } }, include: { requestBody: true } };
      const { text, steps, runs } = await runSteps('', stream, thinking);
      assert.match(text, /Final answer \(simulated\)/);
      assert.equal(runs.length, 1);
      for (const step of steps) assert.ok(step.reasoningText, `step without reasoning: ${JSON.stringify(step.content)}`);
      const sent = steps[1].request.body;
      const body = typeof sent === 'string' ? JSON.parse(sent) : sent;
      const assistant = body.messages.find((m) => m.role === 'assistant');
      const block = assistant.content.find((b) => b.type === 'thinking');
      assert.ok(block?.thinking && block.signature, `the thinking sent back: ${JSON.stringify(assistant.content)}`);
    });
  }

  test('generateText, standard route: the loop runs to stepCountIs', async () => {
    const { steps, runs } = await runSteps('/standard', false);
    assert.equal(steps.length, maxSteps);
    assert.ok(runs.length >= maxSteps, `${runs.length} executions`);
  });
});
