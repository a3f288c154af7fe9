// The scenarios, the profiles and what a case must show to pass. The
// simulated models that play the scenarios live in sim/codingagent.go; the
// strings below are theirs (keep both in step).

/** Scenario name → simulated model. */
export const models = {
  session: 'phasegate-sim-agent-session',
  'exact-loop': 'phasegate-sim-agent-loop',
  'cosmetic-loop': 'phasegate-sim-agent-cosmetic',
  thinking: 'phasegate-sim-agent-thinking',
};
export const scenarios = Object.keys(models);

/** Profiles, in table order; unguarded runs only the loops. */
export const profiles = ['default', 'agent', 'unguarded'];
export const unguardedScenarios = ['exact-loop', 'cosmetic-loop'];

/** The gateway's settings per profile (MAX_PHASE_CYCLES=10: the seeds' 3 would cut the 8-command survey by design). */
export const maxPhaseCycles = 10;
export const profileEnv = {
  default: { MAX_PHASE_CYCLES: String(maxPhaseCycles) },
  agent: { GUARD_PROFILE: 'agent' },
};

/** A loop must end within this many executions of its command. */
export const loopLimit = 4;
/** The turn limit given to an agent with its own flag in an unguarded run. */
export const unguardedTurns = 8;
/** The runner stops an agent after this many executions of a looping command. */
export const runnerCap = 12;
/** Every case ends within this time, unless --timeout says otherwise. */
export const caseTimeoutSeconds = 120;

const answerLead = 'Final answer (simulated):';
const thinkingIntact = 'every reasoning_content came back intact';
const surveySteps = 8;
const loopCommand = 'wc -l README.md';
const cosmetic = /^echo +("done"|'done'|done)( # check)?;?$/;

/** The prompt of every case: the models read the project's directory from it. */
export const prompt = (project) => `Survey the project at ${project} and report what it holds.`;

/** The README.md of the project each case runs in. */
export const readme = '# demo\n\nA small project for the agent suite.\n\nTODO: nothing yet.\n';

/** The executions of the scenario's looping command among calls, or of every call. */
export function executions(scenario, calls) {
  if (scenario === 'exact-loop') return calls.filter((c) => c.values.includes(loopCommand)).length;
  if (scenario === 'cosmetic-loop') return calls.filter((c) => c.values.some((v) => cosmetic.test(v))).length;
  return calls.length;
}

/**
 * Judges a finished case. run holds what happened: {calls, errors, notices,
 * restored, shown, exit, timedOut, capped, reached}, and on the Messages
 * wire thinking: {sentBack, problems} (thinkingBlocks of wire.mjs).
 * Returns {ok, executions, outcome, detail}: outcome is the table's word
 * for it, detail what a failure needs to be fixed.
 */
export function judge(c, run) {
  const n = executions(c.scenario, run.calls);
  const shownAnswer = run.shown.text.includes(answerLead);
  const fail = (outcome, detail = '') => ({ ok: false, executions: run.capped ? `>${runnerCap}` : n, outcome, detail });
  const pass = (outcome) => ({ ok: true, executions: run.capped ? `>${runnerCap}` : n, outcome, detail: '' });
  if (run.errors.length > 0) {
    const e = run.errors[0];
    return fail(`gateway answered ${e.status} to ${e.method} ${e.path.split('?')[0]}`, errorDetail(run.errors));
  }
  if (!run.reached) return fail('never reached the gateway', `exit ${run.exit}; ${run.shown.error || 'no output'}\n${run.stderr}`);
  if (c.profile === 'unguarded') {
    // No bound of ours but the runner's cap: how the agent's own limits end
    // the loop is what the table shows.
    const last = run.stderr.split('\n').findLast((l) => l.trim() !== '') ?? '';
    const said = (r) => ({ ...r, note: `the agent said: ${(run.shown.error || run.shown.text || '(nothing)').slice(0, 300)}${last ? `\nits stderr ends: ${last.slice(0, 300)}` : ''}` });
    if (run.capped) return said(pass('ran on until the runner stopped it'));
    if (run.timedOut) return said(pass('ran on until the case timeout'));
    if (run.shown.error) return said(pass('the agent stopped with an error'));
    return said(pass(`the agent ended it${shownAnswer ? ', answered' : ', no answer'}`));
  }
  if (run.timedOut) return fail('timed out', tail(run));
  if (run.capped) return fail(`never stopped`, `${runnerCap} executions of the looping command and no end`);
  if (!shownAnswer) return fail('no answer shown', tail(run));
  return judgeScenario(c, run, n, pass, fail);
}

function judgeScenario(c, run, n, pass, fail) {
  switch (c.scenario) {
    case 'session': {
      const distinct = new Set(run.calls.map((x) => JSON.stringify([x.name, x.args]))).size;
      if (n !== surveySteps || distinct !== surveySteps) return fail(`ran ${n} calls (${distinct} different)`, `want all ${surveySteps} commands, each once`);
      if (run.notices.length > 0) return fail('refused', `the guard's notice reached the agent:\n${run.notices[0].slice(0, 400)}`);
      if (!run.shown.text.includes(`${surveySteps} of ${surveySteps}`)) return fail('answer without the survey', run.shown.text);
      return pass('all 8 ran, answered');
    }
    case 'thinking':
      // On the Messages door the reasoning travels as thinking blocks the
      // gateway signs: each must come back as it was given.
      if (run.thinking?.problems.length > 0) return fail('thinking blocks not sent back as signed', run.thinking.problems.join('\n'));
      if (!run.shown.text.includes(thinkingIntact)) return fail('reasoning lost', run.shown.text);
      if (run.thinking?.sentBack > 0 && run.restored === 0) return pass('signed thinking sent back, answered');
      // Intact either way: sent back by the agent, or restored by the gateway
      // (X-Phasegate-Reasoning-Restored) where the agent dropped it.
      return pass(run.restored > 0 ? 'reasoning restored by the gateway, answered' : 'reasoning sent back, answered');
    case 'cosmetic-loop':
      if (c.profile === 'default') {
        if (n !== maxPhaseCycles || run.notices.length === 0) return fail(`not ended by the cycle budget after ${n}`, tail(run));
        return pass('cycle budget, answered');
      }
    // fall through: the agent profile stops it as a loop
    case 'exact-loop':
      if (n < 1 || n > loopLimit) return fail(`stopped after ${n}`, `want an end within ${loopLimit} executions`);
      return pass('stopped, answered');
  }
  return fail(`unknown scenario ${c.scenario}`);
}

function errorDetail(errors) {
  return errors
    .slice(0, 3)
    .map((e) => `${e.method} ${e.path} → ${e.status}${e.field ? `\n  request field: ${e.field}` : ''}\n  gateway answered: ${e.answer}`)
    .join('\n');
}

function tail(run) {
  return [`exit ${run.exit}`, run.shown.error && `agent error: ${run.shown.error}`, run.shown.text && `agent showed: ${run.shown.text.slice(0, 300)}`, run.stderr]
    .filter(Boolean)
    .join('\n');
}
