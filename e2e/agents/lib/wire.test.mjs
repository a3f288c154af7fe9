// Reading what the gateway saw: executed calls in the three wires, and
// errors with the request field they name.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { executedCalls, fieldAt, gatewayErrors, notices, thinkingBlocks } from './wire.mjs';

const exchange = (request, { status = 200, body = '', contentType = 'application/json', path = '/v1/chat/completions' } = {}) => ({
  method: 'POST',
  path,
  request: JSON.stringify(request),
  status,
  contentType,
  body,
});

describe('executedCalls', () => {
  it('reads chat completions: a call counts once its tool message came back', () => {
    const call = (id, command) => ({ id, type: 'function', function: { name: 'bash', arguments: JSON.stringify({ command }) } });
    const first = exchange({ messages: [{ role: 'user', content: 'go' }, { role: 'assistant', tool_calls: [call('a', 'pwd')] }, { role: 'tool', tool_call_id: 'a', content: '/' }] });
    const fuller = exchange({
      messages: [
        { role: 'user', content: 'go' },
        { role: 'assistant', tool_calls: [call('a', 'pwd')] },
        { role: 'tool', tool_call_id: 'a', content: '/' },
        { role: 'assistant', tool_calls: [call('b', 'ls')] },
        { role: 'tool', tool_call_id: 'b', content: 'x' },
        { role: 'assistant', tool_calls: [call('c', 'never answered')] },
      ],
    });
    const calls = executedCalls('chat', [fuller, first]);
    assert.deepEqual(
      calls.map((c) => [c.id, c.values]),
      [
        ['a', ['pwd']],
        ['b', ['ls']],
      ],
    );
  });

  it('reads the Responses API: function_call items answered by function_call_output', () => {
    const body = {
      input: [
        { type: 'message', role: 'user', content: 'go' },
        { type: 'function_call', call_id: 'c1', name: 'exec_command', arguments: '{"cmd":"wc -l README.md"}' },
        { type: 'function_call_output', call_id: 'c1', output: '5' },
        { type: 'function_call', call_id: 'c2', name: 'exec_command', arguments: '{"cmd":"pwd"}' },
      ],
    };
    assert.deepEqual(
      executedCalls('responses', [exchange(body, { path: '/v1/responses' })]).map((c) => [c.name, c.values]),
      [['exec_command', ['wc -l README.md']]],
    );
  });

  it('reads Messages: tool_use blocks answered by tool_result blocks', () => {
    const body = {
      messages: [
        { role: 'user', content: 'go' },
        { role: 'assistant', content: [{ type: 'text', text: 'ok' }, { type: 'tool_use', id: 't1', name: 'Bash', input: { command: 'echo  done' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'done' }, { type: 'text', text: '<reminder/>' }] },
      ],
    };
    assert.deepEqual(
      executedCalls('messages', [exchange(body, { path: '/v1/messages' })]).map((c) => [c.name, c.values]),
      [['Bash', ['echo  done']]],
    );
  });
});

describe('gatewayErrors', () => {
  it('names the request field an error points at, with its value', () => {
    const request = { tools: [{ type: 'function', name: 'a' }, { type: 'namespace', name: 'multi_agent_v1' }] };
    const answer = { error: { message: 'tools of type "namespace" are not supported', type: 'invalid_request_error', param: 'tools[1].type', code: 'unsupported_parameter' } };
    const [e] = gatewayErrors([exchange(request, { status: 400, body: JSON.stringify(answer), path: '/v1/responses' })]);
    assert.equal(e.status, 400);
    assert.equal(e.field, 'tools[1].type = "namespace"');
    assert.match(e.answer, /unsupported_parameter/);
  });

  it('finds error events in streams of each wire, and nothing in a clean one', () => {
    const sse = (...events) => events.join('\n\n') + '\n\n';
    const streams = {
      chat: sse('data: {"choices":[{"delta":{"content":"a"}}]}', 'data: {"error":{"message":"upstream failed","type":"server_error"}}', 'data: [DONE]'),
      responses: sse('event: response.created\ndata: {"type":"response.created"}', 'event: response.failed\ndata: {"type":"response.failed","response":{"error":{"code":"server_error"}}}'),
      messages: sse('event: message_start\ndata: {"type":"message_start"}', 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}'),
      clean: sse('data: {"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}', 'data: [DONE]'),
    };
    for (const [name, body] of Object.entries(streams)) {
      const errors = gatewayErrors([exchange({}, { body, contentType: 'text/event-stream' })]);
      assert.equal(errors.length, name === 'clean' ? 0 : 1, `${name}: ${JSON.stringify(errors)}`);
    }
  });

  it('takes a 404 without a param as it is', () => {
    const [e] = gatewayErrors([exchange({}, { status: 404, body: '{"error":{"message":"not served","param":null}}', path: '/v1/messages?beta=true' })]);
    assert.equal(e.field, '');
    assert.equal(e.path, '/v1/messages?beta=true');
  });
});

describe('fieldAt', () => {
  it('follows dotted and indexed paths', () => {
    const body = { input: [{ content: [{ type: 'x' }] }] };
    assert.equal(fieldAt(body, 'input[0].content[0].type'), 'x');
    assert.equal(fieldAt(body, 'input.0.content.0.type'), 'x');
    assert.equal(fieldAt(body, 'input[3].type'), undefined);
  });
});

describe('notices', () => {
  it('keeps the answers that showed the guard notice', () => {
    const shown = exchange({}, { body: 'data: {"choices":[{"delta":{"content":"**System Notice**: refused"}}]}' });
    assert.equal(notices([exchange({}, { body: 'data: {}' }), shown]).length, 1);
  });
});

describe('thinkingBlocks', () => {
  const stream = (...deltas) =>
    deltas.map((d) => `event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index: 0, delta: d })}\n\n`).join('');
  const answer = (thinking, signature) =>
    exchange({ messages: [] }, { path: '/v1/messages', contentType: 'text/event-stream', body: stream({ type: 'thinking_delta', thinking: thinking.slice(0, 3) }, { type: 'thinking_delta', thinking: thinking.slice(3) }, { type: 'signature_delta', signature }) });
  const sentBack = (...blocks) => exchange({ messages: [{ role: 'user', content: 'go' }, ...blocks.map((b) => ({ role: 'assistant', content: [{ type: 'thinking', ...b }, { type: 'tool_use', id: 't', name: 'Bash', input: {} }] }))] }, { path: '/v1/messages' });

  it('counts each block sent back as the gateway signed it, once', () => {
    const ex = [answer('Reasoning ✓', 'sig1'), sentBack({ thinking: 'Reasoning ✓', signature: 'sig1' }), answer('Next', 'sig2'), sentBack({ thinking: 'Reasoning ✓', signature: 'sig1' }, { thinking: 'Next', signature: 'sig2' })];
    assert.deepEqual(thinkingBlocks(ex), { sentBack: 2, problems: [] });
  });

  it('names a block sent back changed or with a signature the gateway never gave', () => {
    const ex = [answer('Reasoning ✓', 'sig1'), sentBack({ thinking: 'Reasoning', signature: 'sig1' }, { thinking: 'x', signature: 'forged' })];
    const { problems } = thinkingBlocks(ex);
    assert.equal(problems.length, 2);
    assert.match(problems[0], /signed sig1 came back changed/);
    assert.match(problems[1], /never gave/);
  });
});
