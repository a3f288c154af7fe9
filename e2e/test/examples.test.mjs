// The Node examples of the documentation (README.md and docs/*.md), run as
// written against the default gateway (no key, no provider: the simulated
// model), each with its output checked and a guard on fetch that fails it
// when it reaches beyond the gateway (lib/examples.mjs). The other
// examples run in readme.test.mjs; apart, each file stays well within the
// runner's time for one file.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { checkOutput, examples, runExample, workspace } from '../lib/examples.mjs';
import { startGateway } from '../lib/stack.mjs';

let gateway;
let ws;

before(async () => {
  gateway = await startGateway();
  ws = workspace();
});

after(async () => {
  ws?.remove();
  const stopped = await gateway?.stop();
  if (gateway) assert.deepEqual(stopped, { code: 0, signal: null }, `gateway exit after SIGTERM; logs:\n${gateway.logs()}`);
});

for (const [i, block] of examples('js').entries()) {
  const first = block.code.split('\n')[0].slice(0, 60);
  test(`${block.page}:${block.line} (${block.lang}) ${first}`, () => {
    checkOutput(block, runExample(block, `node${i}`, { gateway, dir: ws.dir }));
  });
}
