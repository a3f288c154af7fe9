// What the gateway saw of an agent's session, read from the exchanges a
// recorder kept: the tool calls the agent executed (a call whose result came
// back in a later request), and every answer that was an error.

import { sseEvents } from '../../lib/recorder.mjs';

/** String leaves of a value, deep: where a command or a path sits in arguments. */
function strings(value, out = []) {
  if (typeof value === 'string') out.push(value);
  else if (Array.isArray(value)) value.forEach((v) => strings(v, out));
  else if (value && typeof value === 'object') Object.values(value).forEach((v) => strings(v, out));
  return out;
}

function parsedArguments(args) {
  if (typeof args !== 'string') return args ?? {};
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

/**
 * The executed calls of one chat completions request: assistant tool_calls
 * answered by a tool message.
 */
function chatCalls(body) {
  const calls = [];
  const answered = new Set();
  for (const m of body.messages ?? []) {
    if (m.role === 'assistant') {
      for (const c of m.tool_calls ?? []) calls.push({ id: c.id, name: c.function?.name, args: parsedArguments(c.function?.arguments) });
    }
    if (m.role === 'tool') answered.add(m.tool_call_id);
  }
  return calls.filter((c) => answered.has(c.id));
}

/**
 * The executed calls of one Responses request: input items of a *_call type
 * answered by the matching *_call_output item.
 */
function responsesCalls(body) {
  const calls = [];
  const answered = new Set();
  for (const item of Array.isArray(body.input) ? body.input : []) {
    const type = String(item.type ?? '');
    if (type.endsWith('_call_output')) answered.add(item.call_id);
    else if (type.endsWith('_call')) calls.push({ id: item.call_id, name: item.name ?? type, args: parsedArguments(item.arguments ?? item.input ?? item.action) });
  }
  return calls.filter((c) => answered.has(c.id));
}

/** The executed calls of one Messages request: tool_use blocks answered by tool_result blocks. */
function messagesCalls(body) {
  const calls = [];
  const answered = new Set();
  for (const m of body.messages ?? []) {
    for (const block of Array.isArray(m.content) ? m.content : []) {
      if (block.type === 'tool_use') calls.push({ id: block.id, name: block.name, args: block.input ?? {} });
      if (block.type === 'tool_result') answered.add(block.tool_use_id);
    }
  }
  return calls.filter((c) => answered.has(c.id));
}

const readers = { chat: chatCalls, responses: responsesCalls, messages: messagesCalls };

function parse(text) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * The calls the agent executed in its session, as the fullest request the
 * gateway received holds them: each {id, name, args, values}, values being
 * the strings of its arguments.
 */
export function executedCalls(wire, exchanges) {
  let best = [];
  for (const e of exchanges) {
    if (e.method !== 'POST') continue;
    const body = parse(e.request);
    if (!body || typeof body !== 'object') continue;
    const calls = readers[wire](body);
    if (calls.length > best.length) best = calls;
  }
  return best.map((c) => ({ ...c, values: strings(c.args) }));
}

/** The value at an error's param path ("tools[3].type", "input.2.type") in body. */
export function fieldAt(body, param) {
  let v = body;
  for (const key of String(param).split(/[.[\]]+/).filter(Boolean)) {
    if (v === null || typeof v !== 'object') return undefined;
    v = v[/^\d+$/.test(key) ? Number(key) : key];
  }
  return v;
}

/** Whether a stream event is an error, in any of the three wires. */
function isErrorEvent(ev) {
  if (ev.event === 'error' || ev.event === 'response.failed') return true;
  const d = ev.data;
  if (!d || typeof d !== 'object') return false;
  // chat completions: {"error": {...}} in place of a chunk
  return d.type === 'error' || d.type === 'response.failed' || (typeof d.error === 'object' && d.error !== null && !('choices' in d));
}

/**
 * Every answer of the gateway that was an error: a status of 400 or more,
 * or an error event in a stream. Each is {method, path, status, answer,
 * field}: field names the request field the error points at and its value,
 * when the error names one (OpenAI's param).
 */
export function gatewayErrors(exchanges) {
  const out = [];
  for (const e of exchanges) {
    const answers = [];
    if (e.status >= 400) answers.push(parse(e.body) ?? e.body);
    else if (e.contentType.startsWith('text/event-stream')) answers.push(...sseEvents(e.body).filter(isErrorEvent).map((ev) => ev.data));
    for (const answer of answers) {
      const err = answer?.error ?? answer?.response?.error ?? answer;
      const param = typeof err === 'object' ? err?.param : undefined;
      let field = '';
      if (param) {
        const value = fieldAt(parse(e.request) ?? {}, param);
        field = `${param} = ${JSON.stringify(value)?.slice(0, 300)}`;
      }
      out.push({ method: e.method, path: e.path, status: e.status, answer: typeof answer === 'string' ? answer.slice(0, 500) : JSON.stringify(answer).slice(0, 500), field });
    }
  }
  return out;
}

/** Whether any answer showed the guard's notice to the agent. */
export function notices(exchanges) {
  return exchanges.filter((e) => e.body.includes('**System Notice**')).map((e) => e.body);
}

/**
 * The thinking blocks of a Messages session, checked: each block the agent
 * sent back in a request must be one the gateway gave it, with the text
 * and the signature of that answer. Returns {sentBack, problems}: how many
 * blocks came back (each counted once), and what came back otherwise.
 */
export function thinkingBlocks(exchanges) {
  const given = new Map(); // signature → thinking text
  for (const e of exchanges) {
    if (!e.contentType?.startsWith('text/event-stream')) continue;
    const text = new Map(); // block index → thinking so far
    for (const { data } of sseEvents(e.body)) {
      const d = data?.delta;
      if (data?.type !== 'content_block_delta' || !d) continue;
      if (d.type === 'thinking_delta') text.set(data.index, (text.get(data.index) ?? '') + d.thinking);
      if (d.type === 'signature_delta') given.set(d.signature, text.get(data.index) ?? '');
    }
  }
  const back = new Map(); // signature → thinking text, of every block sent back
  const problems = [];
  for (const e of exchanges) {
    const body = e.method === 'POST' ? parse(e.request) : undefined;
    for (const m of body?.messages ?? []) {
      for (const block of m.role === 'assistant' && Array.isArray(m.content) ? m.content : []) {
        if (block.type !== 'thinking') continue;
        const want = given.get(block.signature);
        if (want === undefined) problems.push(`a thinking block came back with a signature the gateway never gave: ${JSON.stringify(block).slice(0, 200)}`);
        else if (want !== block.thinking) problems.push(`the thinking block signed ${block.signature} came back changed: ${JSON.stringify(block.thinking).slice(0, 200)}`);
        back.set(block.signature, block.thinking);
      }
    }
  }
  return { sentBack: back.size, problems: [...new Set(problems)] };
}
