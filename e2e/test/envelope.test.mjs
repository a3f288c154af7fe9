// Orchestrator envelopes through the gateway, as the official openai SDK
// sees them: the simulated orchestrator model writes a valid, a broken, a
// repairable or no envelope (the last user message picks which), and the
// guard forwards it, repairs it, or asks the model again, streamed and not.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import OpenAI from 'openai';

import { startGateway } from '../lib/stack.mjs';

const START = '<<<ORCHESTRATOR_RESPONSE>>>';
const END = '<<<END_ORCHESTRATOR_RESPONSE>>>';
const model = 'phasegate-sim-orchestrator';

let gateway;
let strict; // MAX_ENVELOPE_RETRIES=0
let client;
let strictClient;

before(async () => {
  [gateway, strict] = await Promise.all([startGateway(), startGateway({ MAX_ENVELOPE_RETRIES: '0' })]);
  const opts = { apiKey: 'sk-e2e-unused', maxRetries: 0, timeout: 20_000, defaultHeaders: { 'X-Phasegate-Envelope': 'required' } };
  client = new OpenAI({ ...opts, baseURL: `${gateway.root}/v1` });
  strictClient = new OpenAI({ ...opts, baseURL: `${strict.root}/v1` });
});

after(async () => {
  for (const g of [gateway, strict]) {
    const stopped = await g?.stop();
    if (g) assert.deepEqual(stopped, { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${g.logs()}`);
  }
});

/** The one envelope of text, parsed; fails unless there is exactly one. */
function onlyEnvelope(text) {
  assert.equal(text.split(START).length - 1, 1, `want exactly one envelope in ${JSON.stringify(text)}`);
  const body = text.slice(text.indexOf(START) + START.length, text.indexOf(END));
  return JSON.parse(body);
}

async function streamed(c, prompt) {
  const stream = await c.chat.completions.create({ model, messages: [{ role: 'user', content: prompt }], stream: true });
  let text = '';
  let last;
  const finishes = [];
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      text += choice.delta?.content ?? '';
      if (choice.finish_reason) finishes.push(choice.finish_reason);
    }
    last = chunk;
  }
  assert.deepEqual(finishes, ['stop']);
  return { text, report: last.phasegate?.envelope };
}

test('a broken envelope is asked again, never shown (stream)', async () => {
  const { text, report } = await streamed(client, 'Analyse the code (broken).');
  assert.doesNotMatch(text, /"huge"/);
  assert.match(text, /\*\*System Notice\*\*: The orchestrator envelope could not be used \(missing required field data\.recommended_splits\)/);
  const env = onlyEnvelope(text);
  assert.equal(env.phase, 'analysis');
  assert.equal(env.data.recommended_splits, 3);
  assert.deepEqual(report, { phase: 'analysis', found: true, valid: true, repaired: false, errors: [], retries: 1, fallback: null });
});

test('a broken envelope is asked again, never shown (non-stream)', async () => {
  const completion = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Analyse the code (broken).' }] });
  const text = completion.choices[0].message.content;
  assert.doesNotMatch(text, /"huge"/);
  assert.equal(onlyEnvelope(text).data.recommended_splits, 3);
  assert.equal(completion.phasegate.envelope.retries, 1);
  assert.equal(completion.phasegate.envelope.valid, true);
});

test('a repairable envelope is forwarded repaired', async () => {
  for (const stream of [true, false]) {
    let text;
    let report;
    if (stream) {
      ({ text, report } = await streamed(client, 'Analyse the code (repair).'));
    } else {
      const completion = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Analyse the code (repair).' }] });
      text = completion.choices[0].message.content;
      report = completion.phasegate.envelope;
    }
    const env = onlyEnvelope(text); // JSON.parse throws on the model's single quotes and trailing commas
    assert.deepEqual(env, { phase: 'analysis', data: { summary: 'Found 3 modules', recommended_splits: 3 } });
    assert.equal(report.repaired, true, `stream=${stream}`);
    assert.equal(report.retries, 0, `stream=${stream}`);
  }
});

test('a missing envelope is asked again when required', async () => {
  const { text, report } = await streamed(client, 'Analyse the code (missing).');
  assert.match(text, /^Analysis complete\./);
  assert.equal(onlyEnvelope(text).phase, 'analysis');
  assert.equal(report.retries, 1);
});

test('with no re-asks left the answer ends with the verdict and the keyword fallback', async () => {
  const { text, report } = await streamed(strictClient, 'Analyse the code (missing).');
  assert.equal(text, 'Analysis complete. There are three modules: api, store and web.');
  assert.equal(report.valid, false);
  assert.deepEqual(report.errors, [`missing start delimiter ${START}`]);
  assert.deepEqual(report.fallback, ['analysis_complete']);

  const broken = await strictClient.chat.completions.create({ model, messages: [{ role: 'user', content: 'Analyse (broken).' }] });
  assert.doesNotMatch(broken.choices[0].message.content, /ORCHESTRATOR_RESPONSE/);
  assert.equal(broken.phasegate.envelope.valid, false);
  assert.ok(broken.phasegate.envelope.errors.includes('missing required field data.recommended_splits'), JSON.stringify(broken.phasegate.envelope));
});

test('a bad header value is a 400 in OpenAI shape', async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }] }, { headers: { 'X-Phasegate-Envelope': 'always' } }),
    (err) => err instanceof OpenAI.BadRequestError && /X-Phasegate-Envelope must be optional, required or off/.test(err.message),
  );
});
