// Runs real coding-agent CLIs through the gateway: each agent of
// cases.json, headless, in a scratch directory and HOME of its own, on each
// scenario (simulated models that play a survey, an exact loop, a cosmetic
// loop and a thinking session) and each profile (the default guard with
// MAX_PHASE_CYCLES=10, GUARD_PROFILE=agent, and unguarded through
// /standard/v1 for the loops). It builds the gateway and the upstream
// double, starts them on 127.0.0.1 at free ports, runs the cases in
// parallel, prints each result and its time, and checks (or with --write
// writes) the compatibility table in docs/agents.md.
//
//   node run-agents.mjs [--agents a,b] [--scenarios s,t] [--profiles p,q]
//                       [--jobs N] [--repeat N] [--timeout S] [--write] [--keep]
//                       [--verbose]
//
// --agents names agents to run whether cases.json enables them or not;
// --timeout bounds each case (120 s); --keep keeps every case's directory
// (its exchanges.json, stdout and stderr), --verbose those that failed.
// The table is checked only on a full run of the enabled agents.

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { startRecorder } from '../lib/recorder.mjs';
import { buildBinaries, repoRoot, startDouble, startGateway } from '../lib/stack.mjs';
import { agents, binary, installedVersion } from './lib/agents.mjs';
import { caseTimeoutSeconds, judge, models, profileEnv, profiles, prompt, readme, runnerCap, scenarios, unguardedScenarios, unguardedTurns, executions } from './lib/scenarios.mjs';
import * as table from './lib/table.mjs';
import { executedCalls, gatewayErrors, notices, thinkingBlocks } from './lib/wire.mjs';

const here = import.meta.dirname;
const docsFile = path.join(repoRoot, 'docs', 'agents.md');
const apiKey = 'sk-agents-suite-not-a-key';

const { values: opts } = parseArgs({
  options: {
    agents: { type: 'string' },
    scenarios: { type: 'string' },
    profiles: { type: 'string' },
    jobs: { type: 'string', default: '2' },
    repeat: { type: 'string', default: '1' },
    timeout: { type: 'string', default: String(caseTimeoutSeconds) },
    write: { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
    verbose: { type: 'boolean', default: false },
  },
});

const config = JSON.parse(readFileSync(path.join(here, 'cases.json'), 'utf8'));
const list = (s) => (s ? s.split(',').map((x) => x.trim()).filter(Boolean) : undefined);

/** The cases to run, in table order. */
function matrix() {
  const chosen = list(opts.agents) ?? config.agents.filter((a) => a.enabled).map((a) => a.id);
  for (const id of chosen) if (!agents[id]) throw new Error(`unknown agent ${id}: the agents are ${Object.keys(agents).join(', ')}`);
  const wantScenarios = list(opts.scenarios) ?? scenarios;
  const wantProfiles = list(opts.profiles) ?? profiles;
  const cases = [];
  for (const id of Object.keys(agents).filter((a) => chosen.includes(a))) {
    for (const profile of profiles.filter((p) => wantProfiles.includes(p))) {
      for (const scenario of scenarios.filter((s) => wantScenarios.includes(s))) {
        if (profile === 'unguarded' && !unguardedScenarios.includes(scenario)) continue;
        cases.push({ agent: id, profile, scenario });
      }
    }
  }
  return cases;
}

const fullRun = !opts.agents && !opts.scenarios && !opts.profiles;

/** The expected-failure entry of case c, if cases.json has one. */
const expected = (c) => config.expectedFailures.find((x) => x.agent === c.agent && x.profile === c.profile && x.scenario === c.scenario);

/**
 * The gateways: one per profile on the built-in simulated models, and one
 * per profile whose DeepSeek provider is the upstream double serving the
 * same models, for the thinking session (the gateway's thinking-mode
 * repairs act for DeepSeek only). Unguarded cases use /standard/v1.
 */
async function startStack() {
  const double = await startDouble();
  const deepseek = { PROVIDERS: 'deepseek', DEEPSEEK_BASE_URL: double.baseURL, DEEPSEEK_API_KEY: 'sk-double-not-a-key' };
  const [simDefault, simAgent, dsDefault, dsAgent] = await Promise.all([
    startGateway(profileEnv.default),
    startGateway(profileEnv.agent),
    startGateway({ ...profileEnv.default, ...deepseek }),
    startGateway({ ...profileEnv.agent, ...deepseek }),
  ]);
  const gateways = { sim: { default: simDefault, agent: simAgent }, deepseek: { default: dsDefault, agent: dsAgent } };
  return {
    gateway(c) {
      const side = c.scenario === 'thinking' ? gateways.deepseek : gateways.sim;
      return side[c.profile === 'agent' ? 'agent' : 'default'];
    },
    async stop() {
      await Promise.all([simDefault, simAgent, dsDefault, dsAgent].map((g) => g.stop()));
      await double.stop();
    },
  };
}

/** The base URL an agent of wire is given, behind the recorder at root. */
function baseURL(wire, root, profile) {
  const prefix = profile === 'unguarded' ? '/standard' : '';
  return wire === 'messages' ? root + prefix : `${root}${prefix}/v1`;
}

/** Runs one case to its end and returns what the judge needs. */
async function runCase(c, stack) {
  const agent = agents[c.agent];
  const started = Date.now();
  const dir = mkdtempSync(path.join(tmpdir(), `phasegate-agent-${c.agent}-`));
  const home = path.join(dir, 'home');
  const project = path.join(dir, 'project');
  for (const d of [home, project, path.join(dir, 'tmp')]) mkdirSync(d, { recursive: true });
  writeFileSync(path.join(project, 'README.md'), readme);

  let stop;
  const stopped = new Promise((resolve) => (stop = resolve));
  let capped = false;
  const rec = await startRecorder(stack.gateway(c).root, {
    onExchange(e) {
      e.at = (Date.now() - started) / 1000; // seconds into the case, for a kept exchanges.json
      if (gatewayErrors([e]).length > 0) stop('gateway error');
      if (c.scenario.endsWith('loop') && executions(c.scenario, executedCalls(agent.wire, [e])) >= runnerCap) {
        capped = true;
        stop('runner cap');
      }
    },
  });
  const cap = c.profile === 'unguarded' ? unguardedTurns : undefined;
  const { args, env } = agent.prepare({ home, project, base: baseURL(agent.wire, rec.root, c.profile), key: apiKey, model: models[c.scenario], cap, prompt: prompt(project) });
  const proc = spawnAgent(agent, args, env, dir, project);
  let timer;
  const timeout = new Promise((resolve) => (timer = setTimeout(() => resolve('timeout'), Number(opts.timeout) * 1000)));
  const first = await Promise.race([proc.exited, timeout, stopped]);
  clearTimeout(timer);
  proc.kill();
  const exit = first === 'timeout' || first === 'gateway error' || first === 'runner cap' ? `stopped by the runner (${first})` : first;
  await Promise.race([proc.exited, new Promise((r) => setTimeout(r, 5000))]);
  const { stdout, stderr } = proc.output();
  await rec.idle(5000);
  await rec.stop();
  const seconds = (Date.now() - started) / 1000;
  const run = {
    calls: executedCalls(agent.wire, rec.exchanges),
    errors: gatewayErrors(rec.exchanges),
    notices: notices(rec.exchanges),
    restored: rec.exchanges.reduce((n, e) => n + Number(e.headers?.['x-phasegate-reasoning-restored'] ?? 0), 0),
    thinking: agent.wire === 'messages' ? thinkingBlocks(rec.exchanges) : undefined,
    shown: agent.shown(stdout),
    exit,
    timedOut: first === 'timeout',
    capped,
    reached: rec.exchanges.length > 0,
    stderr: stderr.trim().split('\n').slice(-8).join('\n'),
  };
  const verdict = judge(c, run);
  if (opts.keep || (!verdict.ok && opts.verbose)) {
    writeFileSync(path.join(dir, 'exchanges.json'), JSON.stringify(rec.exchanges, null, 1));
    writeFileSync(path.join(dir, 'stdout.txt'), stdout);
    writeFileSync(path.join(dir, 'stderr.txt'), stderr);
    verdict.kept = dir;
  } else {
    rmSync(dir, { recursive: true, force: true });
  }
  return { ...verdict, seconds, requests: rec.exchanges.length };
}

/** Process groups of the agents running, killed if the runner exits first. */
const live = new Set();
process.on('exit', () => {
  for (const pid of live) killGroup(pid);
});

function killGroup(pid) {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

/**
 * Starts an agent in project, in a process group of its own (the commands
 * it starts end with it), with only the environment it is given: PATH,
 * HOME and TMPDIR of its case, the key, and its own settings; nothing of
 * the runner's environment (a developer's provider key) leaks in.
 */
function spawnAgent(agent, args, env, dir, project) {
  const child = spawn(binary(agent), args, {
    cwd: project,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      PATH: `${path.dirname(binary(agent))}:${process.env.PATH ?? '/usr/bin:/bin'}`,
      HOME: path.join(dir, 'home'),
      TMPDIR: path.join(dir, 'tmp'),
      LANG: 'C.UTF-8',
      TERM: 'dumb',
      NO_COLOR: '1',
      PHASEGATE_API_KEY: apiKey,
      ...env,
    },
  });
  if (child.pid) live.add(child.pid);
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (s) => (stdout += s));
  child.stderr.setEncoding('utf8').on('data', (s) => (stderr += s));
  const exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => resolve(signal ? `signal ${signal}` : `code ${code}`));
    child.once('error', (err) => resolve(`spawn failed: ${err.message}`));
  });
  return {
    exited,
    output: () => ({ stdout, stderr }),
    kill() {
      if (!child.pid) return;
      killGroup(child.pid);
      live.delete(child.pid);
    },
  };
}

/** Runs cases with at most jobs at a time, calling report as each ends. */
async function pool(cases, jobs, work, report) {
  const results = new Array(cases.length);
  let next = 0;
  async function worker() {
    while (next < cases.length) {
      const i = next++;
      results[i] = await work(cases[i]);
      report(cases[i], results[i]);
    }
  }
  await Promise.all(Array.from({ length: Math.min(jobs, cases.length) }, worker));
  return results;
}

/** The verdict of case c with its expected-failure entry applied. */
function settle(c, r) {
  const x = expected(c);
  if (!x) return { ...r, status: r.ok ? 'ok' : 'FAIL' };
  if (r.ok) return { ...r, status: 'XPASS', detail: `passes now: remove it from expectedFailures in e2e/agents/cases.json (it waited for ${x.waitsFor})` };
  return { ...r, status: 'xfail', outcome: `expected failure: ${r.outcome}`, detail: `${x.why} (waits for ${x.waitsFor})\n${r.detail}` };
}

const name = (c) => `${c.agent} ${c.profile} ${c.scenario}`;

function printTimes(cases, runs) {
  for (const id of [...new Set(cases.map((c) => c.agent))]) {
    const times = runs.flatMap((results) => results.filter((_, i) => cases[i].agent === id).map((r) => r.seconds)).sort((a, b) => a - b);
    const median = times[Math.floor(times.length / 2)];
    console.log(`agents: ${id} case times: min ${times[0].toFixed(1)} s, median ${median.toFixed(1)} s, max ${times.at(-1).toFixed(1)} s (${times.length} cases)`);
  }
}

async function main() {
  if (Number(process.versions.node.split('.')[0]) < 22) {
    throw new Error(`Node ${process.version} is too old (Claude Code and Qwen Code need 22+): run \`npm test\` or \`npm run agents\` in e2e/agents, which use the pinned node devDependency`);
  }
  const cases = matrix();
  if (cases.length === 0) throw new Error('no case to run');
  for (const id of new Set(cases.map((c) => c.agent))) {
    if (!existsSync(binary(agents[id]))) throw new Error(`${binary(agents[id])} is missing: run npm ci in e2e/agents`);
  }
  const started = Date.now();
  const bin = mkdtempSync(path.join(tmpdir(), 'phasegate-agents-bin-'));
  process.env.PHASEGATE_E2E_BIN_DIR = bin;
  buildBinaries(bin);
  const stack = await startStack();
  const runs = [];
  try {
    const jobs = Number(opts.jobs);
    for (let n = 1; n <= Number(opts.repeat); n++) {
      console.log(`agents: run ${n} of ${opts.repeat}: ${cases.length} cases, ${jobs} at a time`);
      runs.push(
        await pool(cases, jobs, (c) => runCase(c, stack).then((r) => settle(c, r)), (c, r) => {
          console.log(`${r.status.padEnd(5)} ${name(c)}: ${r.outcome} (${r.executions} executions, ${r.requests} requests, ${r.seconds.toFixed(1)} s)`);
          if (r.status !== 'ok' && r.detail) console.log(r.detail.replace(/^/gm, '      '));
          if (r.note) console.log(r.note.replace(/^/gm, '      '));
          if (r.kept) console.log(`      kept ${r.kept}`);
        }),
      );
    }
  } finally {
    await stack.stop();
    rmSync(bin, { recursive: true, force: true });
  }
  return finish(cases, runs, started);
}

function finish(cases, runs, started) {
  printTimes(cases, runs);
  const rows = runs[0].map((r, i) => {
    const a = agents[cases[i].agent];
    return { ...cases[i], agent: a.name, version: installedVersion(a.pkg), wire: a.wire, executions: r.executions, outcome: r.outcome };
  });
  let failed = runs.flat().filter((r) => r.status === 'FAIL' || r.status === 'XPASS').length;
  for (const [n, results] of runs.entries()) {
    results.forEach((r, i) => {
      if (r.outcome !== runs[0][i].outcome || String(r.executions) !== String(runs[0][i].executions)) {
        console.log(`FLAKY ${name(cases[i])}: run 1 ${runs[0][i].outcome} (${runs[0][i].executions}), run ${n + 1} ${r.outcome} (${r.executions})`);
        failed++;
      }
    });
  }
  const rendered = table.render(rows);
  console.log('\n' + rendered + '\n');
  if (opts.write) {
    table.write(docsFile, rendered);
    console.log(`agents: wrote the table to ${path.relative(repoRoot, docsFile)}`);
  } else if (fullRun) {
    const want = table.current(docsFile);
    if (want !== rendered) {
      console.log(`agents: the table in ${path.relative(repoRoot, docsFile)} does not match this run; regenerate it with \`npm run agents -- --write\` in e2e/agents:\n${table.diff(want ?? '', rendered)}`);
      failed++;
    } else {
      console.log(`agents: the table in ${path.relative(repoRoot, docsFile)} matches this run`);
    }
  }
  const all = runs.flat();
  const passed = all.filter((r) => r.status === 'ok').length;
  const skipped = all.filter((r) => r.status === 'xfail').length;
  console.log(`agents: whole run ${((Date.now() - started) / 1000).toFixed(1)} s`);
  console.log(`agents: ${passed} passed, ${failed} failed, ${skipped} skipped`);
  return failed === 0 ? 0 : 1;
}

main().then(
  (status) => process.exit(status),
  (err) => {
    console.error(`agents: ${err.stack ?? err}`);
    process.exit(2);
  },
);
