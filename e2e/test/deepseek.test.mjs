// The DeepSeek hardening through the official openai SDK: a tool call
// DeepSeek leaked into its content comes out as a tool call, a repeatable
// tool is forwarded while its results change and refused when they do not,
// thinking mode's reasoning_content is put back where the agent dropped it,
// and a transient end before the first byte is retried unseen. The upstream
// double's DeepSeek scenarios are in upstreamdouble/main.go; their data is
// repeated here as literals.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';

import OpenAI from 'openai';

import { weatherTool } from '../lib/fixtures.mjs';
import { startDouble, startGateway } from '../lib/stack.mjs';

const model = 'deepseek-v4-flash';
const gatewayKey = 'sk-e2e-deepseek-5c2e9b1a7d';

// The double's data (upstreamdouble/main.go).
const leakedText = 'Let me check the weather.';
const leakedPieces = ['<｜tool▁calls▁begin｜>', '<｜tool▁call▁begin｜>', 'function', '<｜tool▁sep｜>', 'get_weather',
  '\n```json\n', '{"city": ', '"Paris"}', '\n```', '<｜tool▁call▁end｜>', '<｜tool▁calls▁end｜>'];
const leakedArguments = '{"city": "Paris"}';
const runTestsCallID = 'call_e2e_run_tests';
const runTestsAnswer = 'The tests still fail the same way.';
const thinkingReasoning = 'The user wants the weather in Oslo.';
const thinkingCallID = 'call_e2e_think_1';
const thinkingEcho = 'reasoning_content received: ';
const transientAnswer = 'Answered after a transient end.';

const runTestsTool = {
  type: 'function',
  function: { name: 'run_tests', description: 'Run the test suite.', parameters: { type: 'object', properties: {} } },
};

let double;
let gateway;

before(async () => {
  double = await startDouble();
  gateway = await startGateway({ DEEPSEEK_BASE_URL: double.baseURL, DEEPSEEK_API_KEY: gatewayKey, REPEATABLE_TOOLS: 'run_tests' });
});

after(async () => {
  const stopped = await gateway?.stop();
  await double?.stop();
  if (gateway) assert.deepEqual(stopped, { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${gateway.logs()}`);
});

const requestID = (name) => `e2e-ds-${name}-${randomUUID()}`;
const opts = (scenario, id) => ({ headers: { 'X-Test-Scenario': scenario, 'X-Request-Id': id } });
const newClient = (route, root = gateway.root) =>
  new OpenAI({ apiKey: 'sk-e2e-client', baseURL: `${root}/${route}`, maxRetries: 0, timeout: 20_000 });

/** A counter of the gateway's /metrics, 0 when absent. */
async function metric(line) {
  const res = await fetch(`${gateway.root}/metrics`);
  assert.equal(res.status, 200);
  const text = await res.text();
  const found = text.split('\n').find((l) => l.startsWith(line + ' '));
  return found ? Number(found.slice(line.length + 1)) : 0;
}

/** The chunks of a stream, and what the client makes of choice 0. */
async function readStream(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  let content = '';
  let reasoning = '';
  const roles = [];
  const finishes = [];
  for (const chunk of chunks) {
    for (const choice of chunk.choices) {
      content += choice.delta?.content ?? '';
      reasoning += choice.delta?.reasoning_content ?? '';
      if (choice.delta?.role) roles.push(choice.delta.role);
      if (choice.finish_reason) finishes.push(choice.finish_reason);
    }
  }
  return { chunks, content, reasoning, roles, finishes };
}

describe('a tool call leaked into the content', () => {
  test('comes out of /v1 as a tool call the stream helper accumulates', async () => {
    const before = await metric('phasegate_leaked_tool_calls_total{outcome="recovered"}');
    const id = requestID('leak');
    const runner = newClient('v1').chat.completions.stream(
      { model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [weatherTool] },
      opts('leaked-call', id),
    );
    const chunks = [];
    runner.on('chunk', (c) => chunks.push(c));
    const final = await runner.finalChatCompletion();
    const choice = final.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, leakedText, 'the visible text, no marker');
    assert.equal(choice.message.tool_calls?.length, 1, 'exactly one tool call');
    const [call] = choice.message.tool_calls;
    assert.equal(call.type, 'function');
    assert.match(call.id, /^call_/);
    assert.equal(call.function.name, 'get_weather');
    assert.equal(call.function.arguments, leakedArguments);
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
    for (const chunk of chunks) {
      assert.ok(!JSON.stringify(chunk).includes('｜'), `a marker reached the client: ${JSON.stringify(chunk)}`);
    }
    assert.equal(await metric('phasegate_leaked_tool_calls_total{outcome="recovered"}'), before + 1);
    assert.equal((await double.requests(id)).length, 1);
  });

  test('passes through /standard/v1 untouched', async () => {
    const stream = await newClient('standard/v1').chat.completions.create(
      { model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [weatherTool], stream: true },
      opts('leaked-call', requestID('leak-standard')),
    );
    const { content, finishes, chunks } = await readStream(stream);
    assert.equal(content, leakedText + leakedPieces.join(''), 'the markers as the upstream sent them');
    assert.deepEqual(finishes, ['stop']);
    assert.ok(chunks.every((c) => c.choices.every((ch) => !ch.delta?.tool_calls)), 'no tool call made up');
  });
});

describe('a repeatable tool (REPEATABLE_TOOLS=run_tests)', () => {
  /** A history that ran the tests twice, with the given results. */
  const history = (first, second) => [
    { role: 'user', content: 'Make the tests pass.' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_rt_1', type: 'function', function: { name: 'run_tests', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'call_rt_1', content: first },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_rt_2', type: 'function', function: { name: 'run_tests', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'call_rt_2', content: second },
  ];

  test('is forwarded again while its results change', async () => {
    const id = requestID('run-tests-changed');
    const final = await newClient('v1')
      .chat.completions.stream(
        { model, messages: history('FAIL TestParse: want 2, got 3', 'FAIL TestParse: want 2, got 1'), tools: [runTestsTool] },
        opts('run-tests', id),
      )
      .finalChatCompletion();
    const choice = final.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.tool_calls?.length, 1);
    assert.equal(choice.message.tool_calls[0].id, runTestsCallID);
    assert.equal(choice.message.tool_calls[0].function.name, 'run_tests');
    assert.equal((await double.requests(id)).length, 1, 'forwarded from the first answer');
  });

  test('is refused as no_progress when its last two results were the same', async () => {
    const id = requestID('run-tests-unchanged');
    const messages = history('FAIL TestParse: want 2, got 3', 'FAIL TestParse: want 2, got 3');
    const final = await newClient('v1')
      .chat.completions.stream({ model, messages, tools: [runTestsTool] }, opts('run-tests', id))
      .finalChatCompletion();
    const choice = final.choices[0];
    assert.equal(choice.finish_reason, 'stop');
    assert.ok(!choice.message.tool_calls?.length, `the call reached the client: ${JSON.stringify(choice.message.tool_calls)}`);
    assert.match(choice.message.content, /\*\*System Notice\*\*: refused "run_tests": its last two identical runs gave the same result/);
    assert.ok(choice.message.content.endsWith(runTestsAnswer), JSON.stringify(choice.message.content));
    const got = await double.requests(id);
    assert.equal(got.length, 2, 'the model was asked again');
    const notice = got[1].body.messages.at(-1);
    assert.equal(notice.role, 'system');
    assert.match(notice.content, /run_tests.*same result/);
  });
});

describe('thinking mode', () => {
  test('the reasoning_content the agent dropped is restored; without the repair DeepSeek answers 400', async () => {
    for (const route of ['v1', 'standard/v1']) {
      const client = newClient(route);
      const id1 = requestID('thinking-1');
      const messages = [{ role: 'user', content: 'Weather in Oslo?' }];
      const runner = client.chat.completions.stream({ model, messages, tools: [weatherTool] }, opts('thinking', id1));
      let reasoning = '';
      runner.on('chunk', (c) => (reasoning += c.choices[0]?.delta?.reasoning_content ?? ''));
      const first = (await runner.finalChatCompletion()).choices[0];
      assert.equal(reasoning, thinkingReasoning, `${route}: the reasoning streams to the client`);
      assert.equal(first.message.tool_calls?.[0]?.id, thinkingCallID);

      // The agent sends back the call and its result, not the reasoning.
      messages.push(
        { role: 'assistant', content: first.message.content, tool_calls: first.message.tool_calls },
        { role: 'tool', tool_call_id: thinkingCallID, content: 'Rain, 9 °C' },
      );
      assert.ok(!('reasoning_content' in messages[1]));
      const id2 = requestID('thinking-2');
      const { data, response } = await client.chat.completions
        .create({ model, messages, tools: [weatherTool] }, opts('thinking', id2))
        .withResponse();
      assert.equal(data.choices[0].message.content, thinkingEcho + thinkingReasoning, `${route}: the upstream got the reasoning back`);
      assert.equal(response.headers.get('x-phasegate-reasoning-restored'), '1');
      assert.equal(response.headers.get('x-phasegate-reasoning-emptied'), '0');
      const sent = (await double.requests(id2))[0].body.messages[1];
      assert.equal(sent.reasoning_content, thinkingReasoning);
      assert.deepEqual(sent.tool_calls, first.message.tool_calls, 'the rest of the message as the agent sent it');
    }

    // The same request through a gateway that does not repair: the double
    // is as strict as DeepSeek.
    const bare = await startGateway({ DEEPSEEK_BASE_URL: double.baseURL, DEEPSEEK_API_KEY: gatewayKey, THINKING_REPAIR: 'false' });
    try {
      const messages = [
        { role: 'user', content: 'Weather in Oslo?' },
        { role: 'assistant', content: null, tool_calls: [{ id: thinkingCallID, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
        { role: 'tool', tool_call_id: thinkingCallID, content: 'Rain, 9 °C' },
      ];
      await assert.rejects(
        newClient('v1', bare.root).chat.completions.create({ model, messages, tools: [weatherTool] }, opts('thinking', requestID('thinking-bare'))),
        (err) => {
          assert.ok(err instanceof OpenAI.BadRequestError, `want BadRequestError, got ${err?.constructor?.name}: ${err}`);
          assert.match(err.message, /Missing `reasoning_content`/);
          return true;
        },
      );
    } finally {
      assert.deepEqual(await bare.stop(), { code: 0, signal: null });
    }
  });

  test('a call the gateway never served gets an empty reasoning_content', async () => {
    const id = requestID('thinking-unknown');
    const messages = [
      { role: 'user', content: 'Weather in Oslo?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_from_elsewhere', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
      { role: 'tool', tool_call_id: 'call_from_elsewhere', content: 'Rain, 9 °C' },
    ];
    const { data, response } = await newClient('v1')
      .chat.completions.create({ model, messages, tools: [weatherTool] }, opts('thinking', id))
      .withResponse();
    assert.equal(data.choices[0].message.content, thinkingEcho);
    assert.equal(response.headers.get('x-phasegate-reasoning-emptied'), '1');
    assert.equal((await double.requests(id))[0].body.messages[1].reasoning_content, '');
  });
});

describe('a transient end before the first byte', () => {
  for (const route of ['v1', 'standard/v1']) {
    for (const scenario of ['busy-once', 'cut-once']) {
      test(`${scenario} on /${route} is retried unseen`, async () => {
        const before = await metric('phasegate_transient_finishes_total{outcome="retried"}');
        const id = requestID(scenario);
        const stream = await newClient(route).chat.completions.create(
          // A unique message: the double fails the first request with a given body.
          { model, messages: [{ role: 'user', content: `Summarise ${id}.` }], stream: true, stream_options: { include_usage: true } },
          opts(scenario, id),
        );
        const { content, roles, finishes, chunks } = await readStream(stream);
        assert.equal(content, transientAnswer);
        assert.deepEqual(roles, ['assistant'], 'one opening');
        assert.deepEqual(finishes, ['stop'], 'one finish, not insufficient_system_resource');
        assert.equal(chunks.filter((c) => c.usage).length, 1, 'one usage chunk');
        assert.equal((await double.requests(id)).length, 2, 'asked twice upstream');
        assert.equal(await metric('phasegate_transient_finishes_total{outcome="retried"}'), before + 1);
      });
    }
  }
});
