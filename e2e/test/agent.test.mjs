// The agent profile (GUARD_PROFILE=agent) under real agent clients: the
// official openai SDK's runTools helper and the AI SDK's generateText and
// streamText, each running its own tool loop against a simulated workspace.
// A 20-call coding session (explore, read, test, edit and test again five
// times, read, release, poll) runs to its end with no refusal; the two
// cosmetic loops DeepSeek users report end with an answer within 3 wasted
// executions. The scripted model is the double's agent-* scenarios
// (upstreamdouble/agent.go), which pick each call from the request's history;
// their loop data is repeated here as literals.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { createOpenAI } from '@ai-sdk/openai';
import { generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import OpenAI from 'openai';

import { startDouble, startGateway } from '../lib/stack.mjs';

const model = 'deepseek-v4-flash';
const gatewayKey = 'sk-e2e-agent-3f9c1d7e52';
// At most this many model requests per run: the session needs 21.
const maxSteps = 40;
// The session's length and the calls before a loop starts (agent.go).
const sessionCalls = 20;
const leadCalls = 5;
const finalAnswer = (k) => `Final answer after ${k} tool results.`;

let double;
let gateway;

before(async () => {
  double = await startDouble();
  gateway = await startGateway({ DEEPSEEK_BASE_URL: double.baseURL, DEEPSEEK_API_KEY: gatewayKey, GUARD_PROFILE: 'agent' });
});

after(async () => {
  const stopped = await gateway?.stop();
  await double?.stop();
  if (gateway) assert.deepEqual(stopped, { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${gateway.logs()}`);
});

/**
 * A simulated workspace: the tools a coding agent runs, whose results change
 * as the work does (the tests pass after the fifth edit, the release's status
 * moves on at each poll). It records every execution, in order.
 */
function workspace() {
  let edits = 0;
  let polls = 0;
  const runs = [];
  const shell = {
    ls: () => 'cmd pkg',
    'grep -rn Timeout cmd': () => '',
    'grep -rn Timeout pkg': () => 'pkg/dial.go:9: const Timeout = 0',
    'go test ./pkg': () => (edits >= 5 ? 'ok  pkg 0.01s' : '--- FAIL: TestDial\nFAIL pkg'),
    'make release': () => 'job 1 started',
    'make status': () => ['queued', 'running 50%', 'done'][Math.min(polls++, 2)],
    'npm run build': () => "Error: Cannot find module 'x'",
  };
  const impl = {
    run_shell: ({ command }) => (shell[command] ?? (() => `sh: ${command}: not found`))(),
    read_file: ({ path }) => `${path} version ${edits + 1}`,
    edit_file: () => {
      edits++;
      return 'edited';
    },
    execute_code: ({ code }) => (/print\(\s*['"]done['"]\s*\)/.test(code) ? 'done\n' : ''),
  };
  const run = (name, args) => {
    const result = impl[name](args);
    runs.push({ name, args, result });
    return result;
  };
  return { run, runs };
}

const params = { type: 'object', properties: {}, additionalProperties: true };
const toolNames = ['run_shell', 'read_file', 'edit_file', 'execute_code'];
// The prompt names the scenario too, for a gateway that does not forward
// X-Test-Scenario.
const userPrompt = (scenario) => `The dial in pkg times out at once; fix it and ship a release. scenario:${scenario}`;

/** The openai SDK's runTools helper, streamed or not. */
async function viaRunTools(scenario, ws, stream) {
  const client = new OpenAI({
    apiKey: 'sk-e2e-client',
    baseURL: `${gateway.root}/v1`,
    maxRetries: 0,
    timeout: 20_000,
    defaultHeaders: { 'X-Test-Scenario': scenario },
  });
  const tools = toolNames.map((name) => ({
    type: 'function',
    function: { name, parameters: params, parse: JSON.parse, function: (args) => ws.run(name, args) },
  }));
  const runner = client.chat.completions.runTools(
    { model, messages: [{ role: 'user', content: userPrompt(scenario) }], tools, stream },
    { maxChatCompletions: maxSteps },
  );
  return runner.finalContent();
}

/** The AI SDK's generateText or streamText, with tools and stopWhen. */
async function viaAISDK(scenario, ws, stream) {
  const provider = createOpenAI({ apiKey: 'sk-e2e-client', baseURL: `${gateway.root}/v1`, headers: { 'X-Test-Scenario': scenario } });
  const tools = Object.fromEntries(
    toolNames.map((name) => [name, tool({ inputSchema: jsonSchema(params), execute: async (args) => ws.run(name, args) })]),
  );
  const opts = { model: provider.chat(model), prompt: userPrompt(scenario), tools, stopWhen: stepCountIs(maxSteps), maxRetries: 0 };
  if (!stream) return (await generateText(opts)).text;
  let failure;
  const result = streamText({ ...opts, onError: ({ error }) => (failure = error) });
  const text = await result.text;
  if (failure) throw failure;
  return text;
}

const clients = {
  'openai runTools': (s, ws) => viaRunTools(s, ws, false),
  'openai runTools, streamed': (s, ws) => viaRunTools(s, ws, true),
  'AI SDK generateText': (s, ws) => viaAISDK(s, ws, false),
  'AI SDK streamText': (s, ws) => viaAISDK(s, ws, true),
};

// The loop each scenario falls into after the lead (agent.go), and where
// it comes from.
const loops = {
  // NousResearch/hermes-agent issue 37255: "verifying" with execute_code
  // calls that differ only in form and all print the same.
  'agent-loop-code': { tool: 'execute_code', result: 'done\n' },
  // QwenLM/qwen-code issue 4695: "let me stop this loop", then the same
  // shell command again.
  'agent-loop-shell': { tool: 'run_shell', result: "Error: Cannot find module 'x'" },
};

for (const [clientName, runAgent] of Object.entries(clients)) {
  describe(`agent profile via ${clientName}`, () => {
    test('a 20-call coding session runs to its end with no refusal', async () => {
      const ws = workspace();
      const answer = await runAgent('agent-session', ws);
      assert.equal(answer, finalAnswer(sessionCalls), `runs: ${JSON.stringify(ws.runs)}`);
      assert.equal(ws.runs.length, sessionCalls);
      const tests = ws.runs.filter((r) => r.args.command === 'go test ./pkg').map((r) => r.result);
      assert.equal(tests.length, 6, 'the test command ran after every edit');
      assert.equal(tests.at(-1), 'ok  pkg 0.01s');
      assert.deepEqual(
        ws.runs.filter((r) => r.args.command === 'make status').map((r) => r.result),
        ['queued', 'running 50%', 'done'],
      );
    });

    for (const [scenario, loop] of Object.entries(loops)) {
      test(`${scenario} ends with an answer within 3 wasted executions`, async (t) => {
        const ws = workspace();
        const answer = await runAgent(scenario, ws);
        const looped = ws.runs.slice(leadCalls);
        assert.ok(looped.length >= 1 && looped.every((r) => r.name === loop.tool && r.result === loop.result), JSON.stringify(ws.runs));
        // Every execution of the loop after its first one brought nothing new.
        const wasted = looped.length - 1;
        t.diagnostic(`${wasted} wasted executions`);
        assert.ok(wasted <= 3, `${wasted} wasted executions: ${JSON.stringify(looped)}`);
        assert.match(answer, /Final answer after \d+ tool results\./);
        assert.match(answer, new RegExp(`refused "${loop.tool}"`), 'the answer says which call was refused');
      });
    }
  });
}
