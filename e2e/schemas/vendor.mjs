// Cuts out of OpenAI's OpenAPI specification the component schemas the
// Responses API tests validate against, with every schema they refer to,
// and writes them to responses.schema.json beside this file. Descriptions,
// examples and x-* annotations are dropped; nothing else is changed.
//
//   node schemas/vendor.mjs path/to/openai-openapi.json[.gz]
//
// Source: github.com/openai/openai-openapi, commit f85dbe2 (MIT license).

import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';

/** The schemas the tests name; the rest come in through their $refs. */
export const roots = ['Response', 'ResponseStreamEvent', 'ResponseItemList', 'ErrorResponse'];

const dropped = new Set(['description', 'example', 'examples', 'title', 'deprecated']);

/** value without annotations; keys of a properties map are names, kept. */
function strip(value, names = false) {
  if (Array.isArray(value)) return value.map((v) => strip(v));
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([k]) => names || !(dropped.has(k) || k.startsWith('x-')))
      .map(([k, v]) => [k, strip(v, !names && k === 'properties')]),
  );
}

function closure(schemas) {
  const seen = new Set();
  const queue = [...roots];
  while (queue.length > 0) {
    const name = queue.pop();
    if (seen.has(name)) continue;
    if (!schemas[name]) throw new Error(`schema ${name} is not in the specification`);
    seen.add(name);
    JSON.stringify(schemas[name], (k, v) => {
      if (k === '$ref') queue.push(v.replace('#/components/schemas/', ''));
      return v;
    });
  }
  return [...seen].sort();
}

if (import.meta.main || process.argv[1] === import.meta.filename) {
  const src = process.argv[2];
  if (!src) throw new Error('usage: node schemas/vendor.mjs openai-openapi.json[.gz]');
  let raw = readFileSync(src);
  if (src.endsWith('.gz')) raw = gunzipSync(raw);
  const spec = JSON.parse(raw.toString('utf8'));
  const schemas = spec.components.schemas;
  const names = closure(schemas);
  const out = {
    $comment: 'Cut from OpenAI\'s OpenAPI specification (github.com/openai/openai-openapi, commit f85dbe2, MIT license) by vendor.mjs: the schemas named in its roots and all they refer to, without descriptions, examples and x-* annotations.',
    components: { schemas: Object.fromEntries(names.map((n) => [n, strip(schemas[n])])) },
  };
  writeFileSync(path.join(import.meta.dirname, 'responses.schema.json'), JSON.stringify(out, null, 1) + '\n');
  console.log(`${names.length} schemas`);
}
