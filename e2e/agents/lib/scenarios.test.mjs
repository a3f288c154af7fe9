// What a case must show to pass.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { executions, judge, loopLimit, maxPhaseCycles, runnerCap } from './scenarios.mjs';

const answer = 'Final answer (simulated): done.';
const call = (...values) => ({ id: String(Math.random()), name: 'bash', args: {}, values });
const run = (over = {}) => ({ calls: [], errors: [], notices: [], restored: 0, shown: { text: answer, error: '' }, exit: 'code 0', timedOut: false, capped: false, reached: true, stderr: '', ...over });
const loop = (n, command = 'wc -l README.md') => Array.from({ length: n }, () => call(command));

describe('executions', () => {
  it('counts the looping command only in a loop, every call otherwise', () => {
    const calls = [call('wc -l README.md'), call('pwd'), call('echo  "done";'), call('echo done && ls')];
    assert.equal(executions('exact-loop', calls), 1);
    assert.equal(executions('cosmetic-loop', calls), 1);
    assert.equal(executions('session', calls), 4);
  });
});

describe('judge', () => {
  const c = (profile, scenario) => ({ agent: 'x', profile, scenario });
  const survey = ['pwd', 'ls -la', 'cat README.md', 'wc -l README.md', 'grep -c . README.md', 'find .', 'head -n 3 README.md', 'du -sk .'].map((v) => ({ ...call(v), args: { command: v } }));
  const surveyed = 'Final answer (simulated): surveyed the project with 8 of 8 read-only commands.';

  const tests = [
    { name: 'the whole survey', c: c('agent', 'session'), run: run({ calls: survey, shown: { text: surveyed, error: '' } }), ok: true },
    { name: 'a survey cut short', c: c('default', 'session'), run: run({ calls: survey.slice(0, 3), shown: { text: surveyed, error: '' } }), ok: false },
    { name: 'a survey the guard refused once', c: c('agent', 'session'), run: run({ calls: survey, notices: ['**System Notice**: refused'], shown: { text: surveyed, error: '' } }), ok: false },
    { name: 'an exact loop stopped at the limit', c: c('default', 'exact-loop'), run: run({ calls: loop(loopLimit) }), ok: true },
    { name: 'an exact loop stopped past the limit', c: c('agent', 'exact-loop'), run: run({ calls: loop(loopLimit + 1) }), ok: false },
    { name: 'a stopped loop with no answer shown', c: c('agent', 'exact-loop'), run: run({ calls: loop(2), shown: { text: '', error: 'halted' } }), ok: false },
    { name: 'a loop the runner had to stop', c: c('agent', 'cosmetic-loop'), run: run({ calls: loop(runnerCap, 'echo done'), capped: true }), ok: false },
    { name: 'the cycle budget ends the cosmetic loop', c: c('default', 'cosmetic-loop'), run: run({ calls: loop(maxPhaseCycles, 'echo done'), notices: ['budget'] }), ok: true },
    { name: 'a cosmetic loop ended early on the default profile', c: c('default', 'cosmetic-loop'), run: run({ calls: loop(2, 'echo done'), notices: ['x'] }), ok: false },
    { name: 'reasoning intact', c: c('default', 'thinking'), run: run({ calls: loop(2, 'pwd'), shown: { text: 'Final answer (simulated): ran 2 commands; every reasoning_content came back intact.', error: '' } }), ok: true },
    { name: 'reasoning lost', c: c('agent', 'thinking'), run: run({ calls: loop(2, 'pwd'), shown: { text: 'Final answer (simulated): reasoning_content did not come back intact.', error: '' } }), ok: false },
    { name: 'a gateway error fails any case', c: c('unguarded', 'exact-loop'), run: run({ calls: loop(9), errors: [{ method: 'POST', path: '/v1/x', status: 400, answer: '{}', field: '' }] }), ok: false },
    { name: 'an agent that never reached the gateway', c: c('default', 'session'), run: run({ reached: false }), ok: false },
    { name: 'an unguarded loop the agent ended', c: c('unguarded', 'exact-loop'), run: run({ calls: loop(4), shown: { text: '', error: 'loop detected' } }), ok: true },
    { name: 'a guarded case that timed out', c: c('agent', 'exact-loop'), run: run({ calls: loop(1), timedOut: true }), ok: false },
  ];
  for (const tt of tests) {
    it(tt.name, () => {
      const got = judge(tt.c, tt.run);
      assert.equal(got.ok, tt.ok, `${got.outcome}: ${got.detail}`);
    });
  }

  it('says who kept the reasoning intact', () => {
    const text = 'Final answer (simulated): ran 2 commands; every reasoning_content came back intact.';
    assert.equal(judge(c('agent', 'thinking'), run({ calls: loop(2, 'pwd'), shown: { text, error: '' } })).outcome, 'reasoning sent back, answered');
    assert.equal(judge(c('agent', 'thinking'), run({ calls: loop(2, 'pwd'), restored: 2, shown: { text, error: '' } })).outcome, 'reasoning restored by the gateway, answered');
    assert.equal(judge(c('agent', 'thinking'), run({ calls: loop(2, 'pwd'), thinking: { sentBack: 2, problems: [] }, shown: { text, error: '' } })).outcome, 'signed thinking sent back, answered');
  });

  it('fails a Messages session whose thinking blocks came back changed, whatever the model said', () => {
    const text = 'Final answer (simulated): ran 2 commands; every reasoning_content came back intact.';
    const got = judge(c('agent', 'thinking'), run({ calls: loop(2, 'pwd'), thinking: { sentBack: 2, problems: ['the thinking block signed s came back changed'] }, shown: { text, error: '' } }));
    assert.equal(got.ok, false);
    assert.equal(got.outcome, 'thinking blocks not sent back as signed');
    assert.match(got.detail, /came back changed/);
  });

  it('names the request field of a gateway error in the detail', () => {
    const got = judge(c('default', 'session'), run({ errors: [{ method: 'POST', path: '/v1/responses', status: 400, answer: '{"error":{}}', field: 'tools[4].type = "namespace"' }] }));
    assert.equal(got.outcome, 'gateway answered 400 to POST /v1/responses');
    assert.match(got.detail, /request field: tools\[4\]\.type = "namespace"/);
  });
});
