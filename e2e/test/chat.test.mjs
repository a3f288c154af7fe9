// The official openai SDK through the gateway to a scripted upstream: every
// scenario on /v1 (the default protocol) and on /standard/v1 (the plain
// pass-through), checked with the SDK's own parsing, iterators and helpers.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';

import OpenAI from 'openai';

import * as want from '../lib/fixtures.mjs';
import { startDouble, startGateway } from '../lib/stack.mjs';

// The key the gateway holds for the upstream, and the one the client sends:
// the upstream must see the first, the gateway's logs neither.
const gatewayKey = 'sk-e2e-gateway-4f1d2c9a7b';
const clientKey = 'sk-e2e-client-8e3b5a1f0c';
const model = 'e2e-model-a';

let double;
let gateway;

before(async () => {
  double = await startDouble();
  gateway = await startGateway({ OPENAI_BASE_URL: double.baseURL, OPENAI_API_KEY: gatewayKey });
});

after(async () => {
  const stopped = await gateway?.stop();
  await double?.stop();
  if (!gateway) return;
  assert.deepEqual(stopped, { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${gateway.logs()}`);
  for (const key of [gatewayKey, clientKey]) {
    assert.ok(!gateway.logs().includes(key), `gateway logs carry the key ${key}:\n${gateway.logs()}`);
  }
});

/** A request id of its own for every request, to find it at the double. */
const requestID = (name) => `e2e-${name}-${randomUUID()}`;

/** Per-request options: the double's scenario and our request id. */
const opts = (scenario, id) => ({ headers: { 'X-Test-Scenario': scenario, 'X-Request-Id': id } });

const user = (text) => [{ role: 'user', content: text }];

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

/** The deltas of choice 0 across chunks, and every finish reason seen. */
function choiceDeltas(chunks) {
  const deltas = [];
  const finishes = [];
  for (const chunk of chunks) {
    for (const choice of chunk.choices) {
      assert.equal(choice.index, 0, 'only choice 0 was asked for');
      deltas.push(choice.delta ?? {});
      if (choice.finish_reason) finishes.push(choice.finish_reason);
    }
  }
  return { deltas, finishes };
}

for (const route of ['v1', 'standard/v1']) {
  describe(`/${route}`, () => {
    let client;
    before(() => {
      client = new OpenAI({ apiKey: clientKey, baseURL: `${gateway.root}/${route}`, maxRetries: 0, timeout: 20_000 });
    });

    test('streaming text: the SDK iterator yields every delta and one finish_reason', async () => {
      const id = requestID('stream-text');
      const stream = await client.chat.completions.create({ model, messages: user('hi'), stream: true }, opts('text', id));
      const chunks = await collect(stream);
      const { deltas, finishes } = choiceDeltas(chunks);
      assert.deepEqual(
        deltas.map((d) => d.content).filter((c) => c),
        want.textPieces,
        'content deltas, in order, none merged or lost',
      );
      assert.equal(deltas.map((d) => d.content ?? '').join(''), want.text);
      assert.equal(deltas[0].role, 'assistant', 'first delta carries the role');
      assert.deepEqual(finishes, ['stop'], 'exactly one finish_reason');
      const last = chunks.at(-1);
      assert.equal(last.choices[0]?.finish_reason, 'stop', 'finish_reason on the last chunk');
      for (const chunk of chunks) {
        assert.equal(chunk.object, 'chat.completion.chunk');
        assert.equal(chunk.id, chunks[0].id, 'every chunk shares one id');
        assert.equal(chunk.model, model);
        assert.ok(chunk.usage == null, 'no usage chunk unless stream_options.include_usage');
      }
    });

    test('non-streaming text: content, finish_reason, usage with vendor fields, request id', async () => {
      const id = requestID('text');
      const { data, response } = await client.chat.completions
        .create({ model, messages: user('hi') }, opts('text', id))
        .withResponse();
      assert.equal(data.object, 'chat.completion');
      assert.equal(data.choices.length, 1);
      assert.equal(data.choices[0].message.role, 'assistant');
      assert.equal(data.choices[0].message.content, want.text);
      assert.equal(data.choices[0].finish_reason, 'stop');
      assert.deepEqual(data.usage, want.usage);
      assert.equal(data._request_id, id, 'the SDK reads back the X-Request-Id we sent');
      assert.equal(response.headers.get('x-request-id'), id);
      assert.equal(response.headers.get('x-phasegate-provider'), 'openai');
      // Without tools the guard has nothing to judge: /v1 passes it through too.
      assert.equal(response.headers.get('x-phasegate-protocol'), 'standard');
    });

    test('usage survives streaming with include_usage, vendor fields included', async () => {
      const id = requestID('usage');
      const stream = await client.chat.completions.create(
        { model, messages: user('hi'), stream: true, stream_options: { include_usage: true } },
        opts('text', id),
      );
      const chunks = await collect(stream);
      const withUsage = chunks.filter((c) => c.usage != null);
      assert.equal(withUsage.length, 1, 'exactly one usage chunk');
      assert.equal(withUsage[0], chunks.at(-1), 'usage comes last');
      assert.deepEqual(withUsage[0].choices, [], 'the usage chunk has no choices');
      assert.deepEqual(withUsage[0].usage, want.usage);
      assert.equal(choiceDeltas(chunks).deltas.map((d) => d.content ?? '').join(''), want.text);
    });

    test('reasoning_content survives, streaming (raw deltas) and not', async () => {
      const id = requestID('reasoning-stream');
      const stream = await client.chat.completions.create({ model, messages: user('hi'), stream: true }, opts('reasoning', id));
      const { deltas, finishes } = choiceDeltas(await collect(stream));
      const reasoning = deltas.filter((d) => typeof d.reasoning_content === 'string').map((d) => d.reasoning_content);
      assert.deepEqual(reasoning, want.reasoningPieces);
      assert.equal(deltas.map((d) => d.content ?? '').join(''), want.reasoningAnswer);
      const firstContent = deltas.findIndex((d) => d.content);
      const lastReasoning = deltas.findLastIndex((d) => typeof d.reasoning_content === 'string');
      assert.ok(lastReasoning < firstContent, 'reasoning comes before content');
      assert.deepEqual(finishes, ['stop']);

      const completion = await client.chat.completions.create({ model, messages: user('hi') }, opts('reasoning', requestID('reasoning')));
      assert.equal(completion.choices[0].message.reasoning_content, want.reasoning);
      assert.equal(completion.choices[0].message.content, want.reasoningAnswer);
    });

    test('a fragmented tool call is accumulated by the stream helper byte for byte', async () => {
      const id = requestID('tool-stream');
      const runner = client.chat.completions.stream(
        { model, messages: user('weather in Zürich?'), tools: [want.weatherTool] },
        opts('tool-call', id),
      );
      const doneEvents = [];
      runner.on('tool_calls.function.arguments.done', (ev) => doneEvents.push(ev));
      const final = await runner.finalChatCompletion();
      assert.equal(final.choices.length, 1);
      const choice = final.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.equal(choice.message.role, 'assistant');
      assert.equal(choice.message.tool_calls?.length, 1, 'exactly one tool call');
      const [call] = choice.message.tool_calls;
      assert.equal(call.id, want.toolCall.id);
      assert.equal(call.type, 'function');
      assert.equal(call.function.name, want.toolCall.name);
      assert.equal(call.function.arguments, want.toolCall.arguments, 'arguments byte for byte');
      assert.deepEqual(JSON.parse(call.function.arguments), want.toolCallArgs);
      assert.equal(doneEvents.length, 1, 'one tool_calls.function.arguments.done event');
      assert.equal(doneEvents[0].name, want.toolCall.name);
      assert.equal(doneEvents[0].arguments, want.toolCall.arguments);
    });

    test('a tool call, not streaming', async () => {
      const completion = await client.chat.completions.create(
        { model, messages: user('weather in Zürich?'), tools: [want.weatherTool] },
        opts('tool-call', requestID('tool')),
      );
      const choice = completion.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.equal(choice.message.tool_calls.length, 1);
      assert.equal(choice.message.tool_calls[0].id, want.toolCall.id);
      assert.equal(choice.message.tool_calls[0].function.name, want.toolCall.name);
      assert.equal(choice.message.tool_calls[0].function.arguments, want.toolCall.arguments);
    });

    test('the request reaches the upstream losslessly, with the gateway key', async () => {
      const id = requestID('lossless');
      const body = {
        model,
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'hi' },
        ],
        stream: true,
        stream_options: { include_usage: true },
        temperature: 0,
        top_p: 1,
        thinking: { type: 'enabled' },
        metadata: { suite: 'e2e' },
      };
      await collect(await client.chat.completions.create(body, opts('text', id)));
      const got = await double.requests(id);
      assert.equal(got.length, 1, 'one upstream call');
      assert.equal(got[0].method, 'POST');
      assert.equal(got[0].path, '/v1/chat/completions');
      assert.deepEqual(got[0].body, body, 'every field, temperature 0 and vendor fields included');
      const header = (name) => got[0].header[name]?.[0];
      assert.equal(header('Authorization'), `Bearer ${gatewayKey}`, 'the gateway sends its own key');
      assert.equal(header('X-Request-Id'), id);
    });

    test('an upstream 429 whose Retry-After is over the retry bound is relayed at once: the SDK throws RateLimitError', async () => {
      for (const stream of [false, true]) {
        const id = requestID(`rate-limit-${stream}`);
        await assert.rejects(
          client.chat.completions.create({ model, messages: user('hi'), stream }, opts('rate-limit', id)),
          (err) => {
            assert.ok(err instanceof OpenAI.RateLimitError, `want RateLimitError, got ${err?.constructor?.name}: ${err}`);
            assert.equal(err.status, want.rateLimit.status);
            assert.equal(err.code, want.rateLimit.code);
            assert.equal(err.type, want.rateLimit.type);
            assert.equal(err.headers.get('retry-after'), want.rateLimit.retryAfter);
            assert.equal(err.requestID, id);
            return true;
          },
          `stream: ${stream}`,
        );
        assert.equal((await double.requests(id)).length, 1, 'no retry: the upstream asks to wait longer than UPSTREAM_RETRY_MAX_WAIT');
      }
    });

    test('a missing messages field is a 400 from the gateway itself: BadRequestError', async () => {
      const id = requestID('no-messages');
      await assert.rejects(
        client.chat.completions.create({ model }, opts('text', id)),
        (err) => {
          assert.ok(err instanceof OpenAI.BadRequestError, `want BadRequestError, got ${err?.constructor?.name}: ${err}`);
          assert.equal(err.status, 400);
          assert.equal(err.param, 'messages');
          assert.equal(err.type, 'invalid_request_error');
          assert.match(err.message, /messages/);
          return true;
        },
      );
      assert.deepEqual(await double.requests(id), [], 'nothing reached the upstream');
    });

    /** Reads a stream that must fail; returns the error and the text before it. */
    async function failingStream(scenario) {
      const stream = await client.chat.completions.create(
        { model, messages: user('hi'), stream: true },
        opts(scenario, requestID(scenario)),
      );
      let text = '';
      try {
        for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      } catch (err) {
        return { err, text };
      }
      assert.fail(`the ${scenario} stream ended as a success with text ${JSON.stringify(text)}`);
    }

    test('a stream that ends without finish or [DONE] is an SDK error, not a silent success', async () => {
      const { err, text } = await failingStream('truncated');
      assert.ok(err instanceof OpenAI.APIError, `want APIError, got ${err?.constructor?.name}: ${err}`);
      assert.equal(err.code, 'upstream_truncated');
      assert.equal(text, 'partial ', 'what came before the end was delivered');
    });

    test('a stream whose connection drops mid-way is an SDK error, not a silent success', async () => {
      const { err, text } = await failingStream('cut');
      assert.ok(err instanceof OpenAI.APIError, `want APIError, got ${err?.constructor?.name}: ${err}`);
      assert.match(err.code ?? '', /^upstream_/);
      assert.equal(text, 'partial ', 'what came before the cut was delivered');
    });

    test('a dropped connection mid-stream is reported as truncated, not unreachable', async () => {
      const { err } = await failingStream('cut');
      assert.equal(err.code, 'upstream_truncated');
    });
  });
}

describe('/v1 with the two-stage guard', () => {
  let client;
  before(() => {
    client = new OpenAI({ apiKey: clientKey, baseURL: `${gateway.root}/v1`, maxRetries: 0, timeout: 20_000 });
  });

  test('phase metadata rides on every chunk and the SDK carries it through untouched', async () => {
    const id = requestID('phase');
    const headers = { ...opts('tool-call', id).headers, 'X-Project-Id': 'e2e-project' };
    const phases = new Set(['action_phase', 'tool_phase', 'complete']);
    const stream = await client.chat.completions.create(
      { model, messages: user('weather?'), tools: [want.weatherTool], stream: true },
      { headers },
    );
    const chunks = await collect(stream);
    assert.ok(chunks.length > 0);
    for (const chunk of chunks) {
      assert.equal(chunk.phasegate?.request_id, id, `chunk without phase metadata: ${JSON.stringify(chunk)}`);
      assert.equal(chunk.phasegate.project_id, 'e2e-project');
      assert.ok(phases.has(chunk.phasegate.phase), chunk.phasegate.phase);
    }
    assert.equal(chunks.at(-1).phasegate.phase, 'complete');

    const completion = await client.chat.completions.create(
      { model, messages: user('hi'), tools: [want.weatherTool] },
      { headers: { ...opts('text', id).headers } },
    );
    assert.equal(completion.phasegate?.request_id, id);
    assert.equal(completion.phasegate.phase, 'complete');
    assert.equal(completion.choices[0].message.content, want.text);
  });

  test('a request without tools is passed through: the upstream answer as it came, no phase metadata', async () => {
    const id = requestID('no-tools');
    const { data, response } = await client.chat.completions
      .create({ model, messages: user('hi') }, opts('text', id))
      .withResponse();
    assert.equal(response.headers.get('x-phasegate-protocol'), 'standard');
    assert.equal(data.phasegate, undefined, `a tool-less answer carries no phase metadata: ${JSON.stringify(data)}`);
    assert.equal(data.choices[0].message.content, want.text);
    const got = await double.requests(id);
    assert.equal(got.length, 1);
    assert.equal(got[0].body.stream, undefined, 'the request went upstream as it came, not made to stream');
  });

  test('a repeated tool call is refused and the model re-asked, within one SDK call', async () => {
    const id = requestID('duplicate');
    const messages = [
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_e2e_dup_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_e2e_dup_1', content: 'Sunny, 21 °C' },
    ];
    const final = await client.chat.completions
      .stream({ model, messages, tools: [want.weatherTool], stream_options: { include_usage: true } }, opts('duplicate', id))
      .finalChatCompletion();
    const choice = final.choices[0];
    assert.equal(choice.finish_reason, 'stop');
    assert.ok(!choice.message.tool_calls?.length, `the repeated call reached the client: ${JSON.stringify(choice.message.tool_calls)}`);
    assert.match(choice.message.content, /\*\*System Notice\*\*/, 'the notice is shown to the client');
    assert.ok(choice.message.content.endsWith(want.duplicateAnswer), JSON.stringify(choice.message.content));
    const got = await double.requests(id);
    assert.equal(got.length, 2, 'the model was asked twice');
    assert.equal(got[1].body.messages.at(-1).role, 'system', 'the second call carries the notice');
    assert.deepEqual(got[1].body.messages.slice(0, messages.length), messages, "the client's history is sent unchanged");
    // The guard closed the first call once its tool call was complete, before
    // that call's usage chunk: it adds an estimate for it, and says so.
    const u = final.usage;
    assert.ok(u, 'one usage reaches the client');
    assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
    assert.ok(u.prompt_tokens > want.usage.prompt_tokens && u.completion_tokens > want.usage.completion_tokens,
      `usage sums both calls: ${JSON.stringify(u)}`);
    assert.ok(u.prompt_cache_hit_tokens >= want.usage.prompt_cache_hit_tokens, `vendor usage fields survive the sum: ${JSON.stringify(u)}`);
    assert.equal(final.phasegate?.usage_estimated, true, 'an estimated usage is marked as such');
  });
});

describe('/v1/models', () => {
  test('lists the upstream models through the SDK', async () => {
    const client = new OpenAI({ apiKey: clientKey, baseURL: `${gateway.root}/v1`, maxRetries: 0, timeout: 20_000 });
    const ids = [];
    for await (const m of client.models.list()) {
      assert.equal(m.object, 'model');
      ids.push(m.id);
    }
    assert.deepEqual(ids, want.models);
  });

  test('is served under /standard/v1 too, where an SDK pointed at that route asks', async () => {
    const client = new OpenAI({ apiKey: clientKey, baseURL: `${gateway.root}/standard/v1`, maxRetries: 0, timeout: 20_000 });
    const page = await client.models.list();
    assert.deepEqual(page.data.map((m) => m.id), want.models);
  });
});
