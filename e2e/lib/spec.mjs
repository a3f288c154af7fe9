// Validates what the gateway sends on the Responses API routes against the
// schemas of OpenAI's OpenAPI specification (schemas/responses.schema.json,
// cut from it by schemas/vendor.mjs), with ajv's JSON Schema 2020-12
// validator. The specification is OpenAPI 3.1: its annotations
// (discriminator, the 2019-09 $recursiveRef of a few filter schemas) are
// not validation keywords here, so those spots are checked less strictly,
// never more.

import { readFileSync } from 'node:fs';
import path from 'node:path';

import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

import { sseEvents } from './recorder.mjs';

const id = 'https://phasegate.invalid/responses.schema.json';
const doc = JSON.parse(readFileSync(path.join(import.meta.dirname, '..', 'schemas', 'responses.schema.json'), 'utf8'));

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addFormat('unixtime', { type: 'number', validate: (n) => Number.isInteger(n) && n >= 0 });
ajv.addSchema({ ...doc, $id: id });

const compiled = new Map();

function validator(name) {
  let validate = compiled.get(name);
  if (!validate) {
    validate = ajv.getSchema(`${id}#/components/schemas/${name}`);
    if (!validate) throw new Error(`no schema ${name} in responses.schema.json`);
    compiled.set(name, validate);
  }
  return validate;
}

const refName = (ref) => ref.replace('#/components/schemas/', '');

/** The type values a schema allows, looking through allOf. */
function typeValues(schema) {
  const own = schema.properties?.type;
  const values = [...(own?.enum ?? []), ...(own?.const !== undefined ? [own.const] : [])];
  for (const part of schema.allOf ?? []) values.push(...typeValues(part.$ref ? doc.components.schemas[refName(part.$ref)] : part));
  return values;
}

/**
 * The member of union schema name (a oneOf or anyOf of $refs) whose type
 * is value.type, or undefined: a failed union's own errors list every
 * member's, so the member is what explains a failure.
 */
function member(name, value) {
  const schema = doc.components.schemas[name];
  const refs = (schema?.oneOf ?? schema?.anyOf ?? []).filter((s) => s.$ref).map((s) => refName(s.$ref));
  const hits = refs.filter((r) => typeValues(doc.components.schemas[r]).includes(value?.type));
  return hits.length === 1 ? hits[0] : undefined;
}

// Where a union sits inside the schemas the tests validate.
const nested = {
  Response: (v) => (v?.output ?? []).map((item, i) => [`/output/${i}`, 'OutputItem', item]),
  ResponseItemList: (v) => (v?.data ?? []).map((item, i) => [`/data/${i}`, 'ItemResource', item]),
};

/** The errors of value against schema name, one string each. */
function errorsOf(name, value, at = '') {
  const validate = validator(name);
  if (validate(value)) return [];
  const narrow = member(name, value);
  if (narrow) return errorsOf(narrow, value, at).map((e) => `${e} (as ${narrow})`);
  const inner = [];
  for (const [p, union, v] of nested[name]?.(value) ?? []) inner.push(...errorsOf(union, v, at + p));
  if (value?.response && name.startsWith('Response') && name.endsWith('Event')) inner.push(...errorsOf('Response', value.response, at + '/response'));
  if (value?.item && name.startsWith('Response') && name.endsWith('Event')) inner.push(...errorsOf('OutputItem', value.item, at + '/item'));
  if (inner.length > 0) return inner;
  return validate.errors.map((e) => `${at}${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`);
}

/**
 * The errors of value against the component schema name, as one string
 * each; empty when it validates. A union's errors are those of the member
 * value's type picks.
 */
export function specErrors(name, value) {
  return errorsOf(name, value);
}

/** Throws, naming what breaks, when value is not a valid name. */
export function assertSpec(name, value, what = name) {
  const errors = specErrors(name, value);
  if (errors.length > 0) {
    const shown = errors.slice(0, 12).join('\n  ');
    throw new Error(`${what} is not a valid ${name}:\n  ${shown}${errors.length > 12 ? `\n  (${errors.length - 12} more)` : ''}\n${JSON.stringify(value).slice(0, 2000)}`);
  }
}

// The events that end a stream: nothing follows them but, after an error
// event, the response.failed that says the same.
const ends = new Set(['response.completed', 'response.incomplete', 'response.failed']);

/**
 * Checks a streamed answer of POST /responses: every event has its event:
 * line naming its type and data that is a valid ResponseStreamEvent, the
 * sequence numbers increase, and the stream ends with response.completed,
 * .incomplete or .failed, or an error event, and only there (an error event
 * may be followed by response.failed). Returns the events' data.
 */
export function assertEventStream(body, what) {
  const events = sseEvents(body);
  if (events.length === 0) throw new Error(`${what}: no events in ${JSON.stringify(body.slice(0, 500))}`);
  let last = -1;
  events.forEach(({ event, data }, i) => {
    const at = `${what}, event ${i} (${event})`;
    if (typeof data !== 'object' || data === null) throw new Error(`${at}: data is not a JSON object: ${JSON.stringify(data)}`);
    if (event !== data.type) throw new Error(`${at}: event line ${JSON.stringify(event)}, data type ${JSON.stringify(data.type)}`);
    assertSpec('ResponseStreamEvent', data, at);
    if (!(Number.isInteger(data.sequence_number) && data.sequence_number > last)) {
      throw new Error(`${at}: sequence_number ${data.sequence_number} after ${last}`);
    }
    last = data.sequence_number;
    const next = events[i + 1]?.data?.type;
    const isLast = next === undefined;
    if (ends.has(data.type) && !isLast) throw new Error(`${at}: ${next} after ${data.type}`);
    if (data.type === 'error' && !isLast && next !== 'response.failed') throw new Error(`${at}: ${next} after an error event`);
    if (isLast && !ends.has(data.type) && data.type !== 'error') throw new Error(`${at}: the stream ends with ${data.type}`);
  });
  return events.map((e) => e.data);
}

/**
 * Checks one recorded exchange on a Responses API route against the
 * specification: bodies of POST /responses and GET /responses/{id} are
 * Responses (streams of either, a resume for GET, as assertEventStream
 * says, numbered from 0 or from the event after starting_after), input_items a ResponseItemList, DELETE the deletion object,
 * errors ErrorResponses, streams as assertEventStream says. Exchanges on
 * other routes are not checked; returns whether this one was.
 */
export function assertExchange(x) {
  const path = new URL(x.path, 'http://x').pathname.replace(/^\/(two-stage|standard)\//, '/');
  if (!path.startsWith('/v1/responses')) return false;
  const what = `${x.method} ${x.path} (${x.status})`;
  if (x.contentType.startsWith('text/event-stream')) {
    // A stream answers POST /responses, or GET /responses/{id} with
    // stream=true: a resume, whose first event follows starting_after.
    const query = new URL(x.path, 'http://x').searchParams;
    const resume = x.method === 'GET' && query.get('stream') === 'true';
    if ((x.method !== 'POST' && !resume) || x.status !== 200) throw new Error(`${what}: an event stream`);
    const events = assertEventStream(x.body, what);
    const first = resume ? Number(query.get('starting_after') ?? -1) + 1 : 0;
    if (events[0].sequence_number !== first) throw new Error(`${what}: the first event is number ${events[0].sequence_number}, want ${first}`);
    return true;
  }
  let body;
  try {
    body = JSON.parse(x.body);
  } catch {
    throw new Error(`${what}: ${x.contentType} body is not JSON: ${JSON.stringify(x.body.slice(0, 500))}`);
  }
  if (x.status >= 400) assertSpec('ErrorResponse', body, what);
  else if (x.method === 'DELETE') {
    const id = path.split('/').pop();
    if (JSON.stringify(body) !== JSON.stringify({ id, object: 'response', deleted: true })) {
      throw new Error(`${what}: ${x.body}, want {"id":"${id}","object":"response","deleted":true}`);
    }
  } else if (path.endsWith('/input_items')) assertSpec('ResponseItemList', body, what);
  else assertSpec('Response', body, what);
  return true;
}
