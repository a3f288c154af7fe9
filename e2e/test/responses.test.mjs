// The Responses API (POST /v1/responses, GET and DELETE /v1/responses/{id},
// GET /v1/responses/{id}/input_items) under real clients, unmodified: the
// openai SDK's responses.create and responses.stream, the OpenAI Agents
// SDK's runner with the OpenAI provider (which speaks the Responses API by
// default) and the AI SDK's default openai(model) provider. Each client talks
// to the gateway through a recorder (lib/recorder.mjs), and every body and
// every streamed event the gateway sent on these routes is checked against
// OpenAI's OpenAPI schemas (schemas/responses.schema.json) after each test.
//
// On the simulated looping model every agent client ends with an answer and
// one tool execution through the guarded route, and loops to its own step
// limit on /standard/v1, as the chat clients do.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';

import { Agent, MaxTurnsExceededError, OpenAIProvider, Runner, setTracingDisabled, tool as agentTool } from '@openai/agents';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import OpenAI from 'openai';
import { z } from 'zod';

import * as want from '../lib/fixtures.mjs';
import { startRecorder } from '../lib/recorder.mjs';
import { assertExchange } from '../lib/spec.mjs';
import { startDouble, startGateway } from '../lib/stack.mjs';

// The Agents SDK exports traces to OpenAI unless told not to.
setTracingDisabled(true);

const looping = 'phasegate-sim-looping';
// The agent clients' own step limit.
const maxSteps = 6;
const gatewayKey = 'sk-e2e-responses-gw-7c2d9e41';

let sim; // a gateway with no provider: the simulated models
let simRec;
let double;
let proxied; // a gateway in front of the upstream double
let proxiedRec;

before(async () => {
  double = await startDouble();
  [sim, proxied] = await Promise.all([startGateway(), startGateway({ OPENAI_BASE_URL: double.baseURL, OPENAI_API_KEY: gatewayKey })]);
  [simRec, proxiedRec] = await Promise.all([startRecorder(sim.root), startRecorder(proxied.root)]);
});

after(async () => {
  await Promise.all([simRec?.stop(), proxiedRec?.stop()]);
  const stopped = await Promise.all([sim?.stop(), proxied?.stop()]);
  await double?.stop();
  for (const [i, g] of [sim, proxied].entries()) {
    if (g) assert.deepEqual(stopped[i], { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${g.logs()}`);
  }
  assert.ok(!proxied?.logs().includes(gatewayKey), 'the gateway logs its upstream key');
});

/**
 * test, with every exchange the recorders saw during it checked against the
 * specification afterwards; it also fails when no Responses API exchange
 * happened at all.
 */
function rtest(name, fn, options = {}) {
  test(name, options, async (t) => {
    const marks = [simRec.exchanges.length, proxiedRec.exchanges.length];
    await fn(t);
    await Promise.all([simRec.idle(), proxiedRec.idle()]); // answers a client left are recorded once they end
    const seen = [...simRec.exchanges.slice(marks[0]), ...proxiedRec.exchanges.slice(marks[1])];
    const checked = seen.filter((x) => assertExchange(x)).length;
    assert.ok(checked > 0, 'no Responses API exchange to check');
    t.diagnostic(`${checked} answers valid against the Responses schemas`);
  });
}

/** The bodies clients sent to POST .../responses since mark, parsed. */
function sent(rec, mark = 0) {
  return rec.exchanges
    .slice(mark)
    .filter((x) => x.method === 'POST' && /\/responses$/.test(new URL(x.path, 'http://x').pathname))
    .map((x) => JSON.parse(x.request));
}

const client = (rec, route = 'v1', headers = {}) =>
  new OpenAI({ apiKey: 'sk-e2e-responses-client', baseURL: `${rec.root}/${route}`, maxRetries: 0, timeout: 20_000, defaultHeaders: headers });

const weatherTool = { type: 'function', name: 'get_weather', description: 'Weather forecast for a city.', parameters: want.weatherTool.function.parameters, strict: false };
const timeTool = {
  type: 'function',
  name: 'get_time',
  description: 'Local time in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
};

const calls = (response) => response.output.filter((item) => item.type === 'function_call');

describe('openai SDK, responses.create and responses.stream', () => {
  rtest('create: a text answer, the reasoning as an item, usage', async () => {
    const { data: res, response } = await client(simRec).responses.create({ model: 'phasegate-sim', input: 'hello sim' }).withResponse();
    assert.equal(response.headers.get('x-phasegate-provider'), 'simulated');
    assert.equal(res.object, 'response');
    assert.equal(res.status, 'completed');
    assert.match(res.output_text, /You said: hello sim$/);
    const types = res.output.map((item) => item.type);
    assert.deepEqual(types, ['reasoning', 'message'], 'the reasoning_content as a reasoning item before the message');
    assert.ok(res.usage.input_tokens > 0 && res.usage.total_tokens === res.usage.input_tokens + res.usage.output_tokens, JSON.stringify(res.usage));
  });

  rtest('create: a function call round trip with the whole history inline, store:false', async () => {
    const c = client(simRec);
    const input = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const first = await c.responses.create({ model: 'phasegate-sim', input, tools: [weatherTool], store: false });
    const [call] = calls(first);
    assert.ok(call, JSON.stringify(first.output));
    assert.equal(call.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.arguments), { city: 'example' });
    assert.ok(call.call_id && call.id, 'a function_call has an id and a call_id');
    assert.equal(call.status, 'completed');
    const second = await c.responses.create({
      model: 'phasegate-sim',
      input: [...input, ...first.output, { type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 21 °C' }],
      tools: [weatherTool],
      store: false,
    });
    assert.equal(calls(second).length, 0);
    assert.match(second.output_text, /Sunny, 21 °C/);
    await assert.rejects(c.responses.retrieve(first.id), (err) => err.status === 404, 'store:false keeps nothing');
  });

  rtest('create: previous_response_id continues a stored response; retrieve, input_items, delete', async () => {
    const c = client(simRec);
    const first = await c.responses.create({ model: 'phasegate-sim', input: 'What is the weather in Paris?', tools: [weatherTool] });
    const [call] = calls(first);
    assert.ok(call, JSON.stringify(first.output));
    const second = await c.responses.create({
      model: 'phasegate-sim',
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 21 °C' }],
      tools: [weatherTool],
    });
    assert.equal(second.previous_response_id, first.id);
    assert.match(second.output_text, /Sunny, 21 °C/, 'the model saw its own call and the result');

    const got = await c.responses.retrieve(first.id);
    assert.deepEqual(got.output, first.output);
    // Another key sees none of it.
    const other = new OpenAI({ apiKey: 'sk-e2e-someone-else', baseURL: `${simRec.root}/v1`, maxRetries: 0 });
    await assert.rejects(other.responses.retrieve(first.id), (err) => err.status === 404, 'a response is kept for the key that made it');
    await c.responses.delete(first.id);
    await assert.rejects(c.responses.retrieve(first.id), (err) => err.status === 404);
  });

  // The stored input as the specification's item resources: each with an
  // id (minted when stored, the same on every read), a message's content
  // as parts, a status; newest first, in pages.
  rtest('input_items lists what a response was given, newest first, as item resources', async () => {
    const c = client(simRec);
    const first = await c.responses.create({ model: 'phasegate-sim', input: 'What is the weather in Paris?', tools: [weatherTool] });
    const [call] = calls(first);
    const output = { type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 21 °C' };
    const second = await c.responses.create({ model: 'phasegate-sim', previous_response_id: first.id, input: [output], tools: [weatherTool] });
    const items = await c.responses.inputItems.list(second.id);
    assert.equal(items.data[0].type, 'function_call_output', JSON.stringify(items.data));
    assert.equal(items.data[0].call_id, call.call_id);
    assert.equal(items.data[0].status, 'completed');
    const user = items.data.at(-1);
    assert.equal(user.role, 'user');
    assert.deepEqual(user.content, [{ type: 'input_text', text: 'What is the weather in Paris?' }]);
    assert.ok(items.data.every((item) => typeof item.id === 'string' && item.id !== ''), JSON.stringify(items.data));
    assert.deepEqual(
      items.data.filter((item) => item.type === 'function_call').map((item) => item.id),
      [call.id],
    );

    // Oldest first, one item a page: the SDK's auto-pagination follows
    // after= to the same items, with the same ids.
    const asc = [];
    for await (const item of c.responses.inputItems.list(second.id, { order: 'asc', limit: 1 })) asc.push(item);
    assert.deepEqual(asc.reverse(), items.data);
  });

  rtest('create: previous_response_id brings the stored history to the upstream', async () => {
    const c = client(proxiedRec, 'v1', { 'X-Test-Scenario': 'text' });
    const first = await c.responses.create({ model: 'e2e-model-a', instructions: 'Be brief.', input: 'first question' });
    assert.equal(first.output_text, want.text);
    const id = `e2e-responses-${randomUUID()}`;
    await c.responses.create({ model: 'e2e-model-a', previous_response_id: first.id, input: 'second question' }, { headers: { 'X-Request-Id': id } });
    const [upstream] = await double.requests(id);
    const messages = upstream.body.messages.map((m) => [m.role, typeof m.content === 'string' ? m.content : JSON.stringify(m.content)]);
    assert.deepEqual(
      messages.filter(([role]) => role !== 'system'),
      [
        ['user', 'first question'],
        ['assistant', want.text],
        ['user', 'second question'],
      ],
      JSON.stringify(upstream.body.messages),
    );
  });

  rtest('stream: the event protocol, text and a function call', async () => {
    const c = client(simRec);
    const stream = c.responses.stream({ model: 'phasegate-sim', input: 'What is the weather in Paris?', tools: [weatherTool] });
    const types = [];
    let args = '';
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.function_call_arguments.delta') args += event.delta;
    }
    const final = await stream.finalResponse();
    assert.equal(types[0], 'response.created');
    assert.equal(types[1], 'response.in_progress');
    assert.equal(types.at(-1), 'response.completed');
    for (const t of ['response.output_item.added', 'response.output_item.done', 'response.function_call_arguments.done']) assert.ok(types.includes(t), `${t} in ${types}`);
    const [call] = calls(final);
    assert.equal(call.arguments, args, 'the argument deltas add up to the call');

    const text = c.responses.stream({ model: 'phasegate-sim', input: 'hello stream' });
    let deltas = '';
    const textTypes = new Set();
    for await (const event of text) {
      textTypes.add(event.type);
      if (event.type === 'response.output_text.delta') deltas += event.delta;
    }
    const answer = await text.finalResponse();
    assert.equal(answer.output_text, deltas);
    assert.match(deltas, /You said: hello stream$/);
    for (const t of ['response.content_part.added', 'response.output_text.done', 'response.content_part.done']) assert.ok(textTypes.has(t), `${t} in ${[...textTypes]}`);
  });

  // A resumable stream the client leaves after a few events is taken up
  // again, as OpenAI's own Responses API resumes one: retrieve with
  // stream and starting_after replays the events after that sequence
  // number, and the joined events are one stream.
  rtest('stream: a resumable stream left early is resumed with retrieve(stream, starting_after)', async () => {
    const c = client(simRec, 'v1', { 'X-Phasegate-Resumable': 'true' });
    const head = [];
    const stream = await c.responses.create({ model: 'phasegate-sim', input: 'hello resumable stream', stream: true });
    for await (const event of stream) {
      head.push(event);
      if (head.length === 3) break; // the client leaves
    }
    const id = head[0].response.id;
    const last = head.at(-1).sequence_number;
    const tail = [];
    for await (const event of await c.responses.retrieve(id, { stream: true, starting_after: last })) tail.push(event);
    const joined = [...head, ...tail];
    assert.deepEqual(joined.map((e) => e.sequence_number), joined.map((_, i) => i), 'one run of sequence numbers from 0');
    assert.equal(joined.at(-1).type, 'response.completed', joined.map((e) => e.type).join(' '));
    const text = joined.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    assert.match(text, /You said: hello resumable stream$/);
    const stored = await c.responses.retrieve(id);
    assert.equal(stored.status, 'completed');
    assert.equal(stored.output_text, text, 'the stored response says what the joined stream said');
  });

  rtest('a platform tool is dropped and named, or refused under HOSTED_TOOLS=refuse; background mode is refused with a 400 naming it', async () => {
    const c = client(simRec);
    const { data: res, response } = await c.responses.create({ model: 'phasegate-sim', input: 'hi', tools: [{ type: 'web_search' }] }).withResponse();
    assert.equal(res.status, 'completed');
    assert.equal(response.headers.get('x-phasegate-dropped'), 'tools[0].type=web_search');
    assert.deepEqual(res.tools, [], 'the response repeats no tool the model did not have');
    const refusing = await startGateway({ HOSTED_TOOLS: 'refuse', SHUTDOWN_DRAIN_DELAY: '0s' });
    try {
      const r = new OpenAI({ apiKey: 'sk-e2e-responses-client', baseURL: `${refusing.root}/v1`, maxRetries: 0, timeout: 20_000 });
      await assert.rejects(r.responses.create({ model: 'phasegate-sim', input: 'hi', tools: [{ type: 'web_search' }] }), (err) => {
        assert.equal(err.status, 400);
        assert.match(err.message, /web_search/);
        return true;
      });
    } finally {
      assert.deepEqual(await refusing.stop(), { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${refusing.logs()}`);
    }
    await assert.rejects(c.responses.create({ model: 'phasegate-sim', input: 'hi', background: true }), (err) => {
      assert.equal(err.status, 400);
      assert.match(err.message, /background/);
      return true;
    });
    await assert.rejects(c.responses.create({ model: 'phasegate-sim', input: 'hi', previous_response_id: 'resp_never_made' }), (err) => {
      assert.ok(err.status === 400 || err.status === 404, `status ${err.status}`);
      assert.match(err.message, /resp_never_made/);
      return true;
    });
  });
});

describe('openai SDK through the gateway to the upstream double', () => {
  const c = (scenario) => client(proxiedRec, 'v1', { 'X-Test-Scenario': scenario });

  rtest('a tool call arrives byte for byte, streamed and not', async () => {
    const res = await c('tool-call').responses.create({ model: 'e2e-model-a', input: 'Weather?', tools: [weatherTool] });
    const [call] = calls(res);
    assert.equal(call?.call_id, want.toolCall.id, JSON.stringify(res.output));
    assert.equal(call.name, want.toolCall.name);
    assert.equal(call.arguments, want.toolCall.arguments);
    const stream = c('tool-call').responses.stream({ model: 'e2e-model-a', input: 'Weather?', tools: [weatherTool] });
    let args = '';
    for await (const event of stream) if (event.type === 'response.function_call_arguments.delta') args += event.delta;
    assert.equal(args, want.toolCall.arguments);
    assert.equal(calls(await stream.finalResponse())[0].arguments, want.toolCall.arguments);
  });

  rtest('reasoning_content comes back as a reasoning item', async () => {
    const res = await c('reasoning').responses.create({ model: 'e2e-model-a', input: 'Check it.' });
    const reasoning = res.output.find((item) => item.type === 'reasoning');
    assert.ok(reasoning && JSON.stringify(reasoning).includes(want.reasoning), JSON.stringify(res.output));
    assert.equal(res.output_text, want.reasoningAnswer);
  });

  rtest('an upstream 429 is the SDK RateLimitError, in the error shape', async () => {
    await assert.rejects(c('rate-limit').responses.create({ model: 'e2e-model-a', input: 'hi' }), (err) => {
      assert.equal(err.status, 429);
      assert.equal(err.code, want.rateLimit.code);
      return true;
    });
  });

  rtest('a stream the upstream cuts does not end as completed', async () => {
    const types = [];
    let thrown;
    try {
      for await (const event of c('cut').responses.stream({ model: 'e2e-model-a', input: 'hi' })) types.push(event.type);
    } catch (err) {
      thrown = err;
    }
    assert.ok(!types.includes('response.completed'), `events: ${types}`);
    assert.ok(thrown || ['response.failed', 'response.incomplete', 'error'].includes(types.at(-1)), `events: ${types}`);
  });
});

/** The tools of the agent runs: each execution is counted. */
function counter() {
  const runs = [];
  return { runs, run: (name, args) => (runs.push({ name, args }), `${name}: sunny, 21 °C`) };
}

const prompt = 'What is the weather in Paris, and what time is it there?';

describe('OpenAI Agents SDK, the OpenAI provider (Responses API)', () => {
  async function runAgent(route) {
    const ws = counter();
    const provider = new OpenAIProvider({ openAIClient: client(simRec, route) });
    const tools = ['get_weather', 'get_time'].map((name) =>
      agentTool({ name, description: `${name} for a city`, parameters: z.object({ city: z.string() }), execute: async (args) => ws.run(name, args) }),
    );
    const agent = new Agent({ name: 'weather', instructions: 'Answer with the tools.', model: looping, tools });
    const mark = simRec.exchanges.length;
    try {
      const result = await new Runner({ modelProvider: provider }).run(agent, prompt, { maxTurns: maxSteps });
      return { answer: result.finalOutput, runs: ws.runs, sent: sent(simRec, mark) };
    } catch (err) {
      return { err, runs: ws.runs, sent: sent(simRec, mark) };
    }
  }

  rtest('guarded: an answer after one tool execution', async () => {
    const { answer, err, runs, sent: bodies } = await runAgent('v1');
    assert.ifError(err);
    assert.match(answer, /Final answer \(simulated\)/);
    assert.equal(runs.length, 1, JSON.stringify(runs));
    // What the SDK sends from its second turn on: the whole history, its
    // function call with id, call_id and status, the output with status.
    assert.equal(bodies.length, 2);
    const items = bodies[1].input;
    const call = items.find((i) => i.type === 'function_call');
    assert.ok(call?.id && call.call_id && call.status, JSON.stringify(items));
    assert.ok(items.some((i) => i.type === 'function_call_output' && i.call_id === call.call_id), JSON.stringify(items));
    assert.ok(bodies.every((b) => !('store' in b)), 'no store field: the default, true, holds');
    assert.deepEqual(bodies[0].include, []);
    // Tools go out strict, with a $schema key inside their parameters.
    assert.equal(bodies[1].tools[0].strict, true);
    assert.ok('$schema' in bodies[1].tools[0].parameters, JSON.stringify(bodies[1].tools[0]));
  });

  rtest('standard route: the loop runs to the SDK own turn limit', async () => {
    const { err, runs } = await runAgent('standard/v1');
    assert.ok(err instanceof MaxTurnsExceededError, `want MaxTurnsExceededError, got ${err}`);
    assert.ok(runs.length >= maxSteps, `${runs.length} executions`);
  });
});

describe("AI SDK, the default openai(model) provider (Responses API)", () => {
  async function runSteps(route, stream) {
    const ws = counter();
    const provider = createOpenAI({ apiKey: 'sk-e2e-responses-client', baseURL: `${simRec.root}/${route}` });
    const params = jsonSchema({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] });
    const tools = Object.fromEntries(['get_weather', 'get_time'].map((name) => [name, tool({ inputSchema: params, execute: async (args) => ws.run(name, args) })]));
    const opts = { model: provider(looping), prompt, tools, stopWhen: stepCountIs(maxSteps), maxRetries: 0 };
    const mark = simRec.exchanges.length;
    let result;
    if (stream) {
      let failure;
      const s = streamText({ ...opts, onError: ({ error }) => (failure = error) });
      result = { text: await s.text, steps: await s.steps };
      if (failure) throw failure;
    } else {
      result = await generateText(opts);
    }
    return { text: result.text, steps: result.steps.length, runs: ws.runs, sent: sent(simRec, mark) };
  }

  for (const stream of [false, true]) {
    const how = stream ? 'streamText' : 'generateText';
    rtest(`${how}, guarded: an answer after one tool execution, item references resolved`, async () => {
      const { text, runs, sent: bodies } = await runSteps('v1', stream);
      assert.match(text, /Final answer \(simulated\)/);
      assert.equal(runs.length, 1, JSON.stringify(runs));
      assert.equal(bodies.length, 2);
      assert.equal(bodies[0].tool_choice, 'auto');
      assert.equal(bodies[0].input[0].content[0].type, 'input_text', JSON.stringify(bodies[0].input));
      const items = bodies[1].input;
      assert.ok(items.some((i) => i.type === 'item_reference'), `step 2 sends item references: ${JSON.stringify(items)}`);
      assert.ok(items.some((i) => i.type === 'function_call' && !i.id), JSON.stringify(items));
    });
  }

  rtest('generateText, standard route: the loop runs to stepCountIs', async () => {
    const { steps, runs } = await runSteps('standard/v1', false);
    assert.equal(steps, maxSteps);
    assert.ok(runs.length >= maxSteps, `${runs.length} executions`);
  });
});
