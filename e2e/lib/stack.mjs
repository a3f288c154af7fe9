// Starts the processes the real-client tests talk to: the scripted upstream
// double (e2e/upstreamdouble) and the gateway (cmd/phasegate), both built
// binaries listening on 127.0.0.1 at free ports, never any other address.
//
// Binaries come from $PHASEGATE_E2E_BIN_DIR when set (run-tests.mjs builds
// them there once for every test file); otherwise this module builds them
// into a temporary directory once per process and removes it on exit.

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';

export const repoRoot = path.resolve(import.meta.dirname, '..', '..');

const startTimeoutMs = 20_000;
const stopTimeoutMs = 10_000;

/** Every child still running, killed if this process exits first. */
const live = new Set();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    for (const child of live) child.kill('SIGKILL');
    process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
  });
}

/** Returns the go command: the one on PATH, else /usr/local/go/bin/go. */
export function goCommand() {
  const found = spawnSync('go', ['version'], { stdio: 'ignore' });
  if (!found.error) return 'go';
  if (existsSync('/usr/local/go/bin/go')) return '/usr/local/go/bin/go';
  throw new Error('go not found on PATH nor at /usr/local/go/bin/go');
}

/**
 * Builds the gateway and the upstream double into dir with `go build -o`.
 * Throws with go's output when the build fails.
 */
export function buildBinaries(dir) {
  const res = spawnSync(goCommand(), ['build', '-o', dir + path.sep, './cmd/phasegate', './e2e/upstreamdouble'], {
    cwd: repoRoot,
    encoding: 'utf8',
    env: { ...process.env, CGO_ENABLED: '0' },
  });
  if (res.error) throw res.error;
  if (res.status !== 0) throw new Error(`go build failed (exit ${res.status}):\n${res.stdout}${res.stderr}`);
  return { phasegate: path.join(dir, 'phasegate'), upstreamdouble: path.join(dir, 'upstreamdouble') };
}

let built;
/** The binaries: prebuilt in $PHASEGATE_E2E_BIN_DIR, or built once here. */
export function binaries() {
  if (built) return built;
  const dir = process.env.PHASEGATE_E2E_BIN_DIR;
  if (dir) {
    built = { phasegate: path.join(dir, 'phasegate'), upstreamdouble: path.join(dir, 'upstreamdouble') };
    for (const bin of Object.values(built)) {
      if (!existsSync(bin)) throw new Error(`PHASEGATE_E2E_BIN_DIR is set but ${bin} does not exist`);
    }
    return built;
  }
  const tmp = mkdtempSync(path.join(tmpdir(), 'phasegate-e2e-'));
  process.on('exit', () => rmSync(tmp, { recursive: true, force: true }));
  built = buildBinaries(tmp);
  return built;
}

/**
 * Tracks child and lets this process exit without waiting for it: a test
 * file whose after() hooks did not run (all its tests filtered out, say)
 * must not hang on its children. The exit handler above kills them then.
 */
function own(child) {
  live.add(child);
  child.once('exit', () => live.delete(child));
  child.unref();
  for (const stream of [child.stdin, child.stdout, child.stderr]) stream?.unref?.();
}

/** Resolves once child exits, with its code and signal. */
function exited(child) {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  }
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
}

/** Rejects after ms with message, unless promise settles first. */
async function within(promise, ms, message) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(message())), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Starts the upstream double. It serves until its stdin closes, which stop()
 * does, and which also happens when this process dies.
 *
 * @returns {Promise<{root: string, baseURL: string, requests: (requestID?: string) => Promise<any[]>, stop: () => Promise<{code: number|null, signal: string|null}>}>}
 */
export async function startDouble() {
  const child = spawn(binaries().upstreamdouble, [], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH ?? '' },
  });
  own(child);
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (s) => (stderr += s));
  const lines = createInterface({ input: child.stdout });
  const firstLine = new Promise((resolve, reject) => {
    lines.once('line', resolve);
    child.once('exit', (code, signal) => reject(new Error(`upstreamdouble exited (${code ?? signal}) before printing its address:\n${stderr}`)));
    child.once('error', reject);
  });
  const root = await within(firstLine, startTimeoutMs, () => `upstreamdouble printed no address in ${startTimeoutMs} ms:\n${stderr}`);
  if (!/^http:\/\/127\.0\.0\.1:\d+$/.test(root)) {
    child.kill('SIGKILL');
    throw new Error(`upstreamdouble printed ${JSON.stringify(root)}, want http://127.0.0.1:PORT`);
  }
  return {
    root,
    baseURL: `${root}/v1`,
    /** The requests the double received with X-Request-Id requestID (all when omitted). */
    async requests(requestID = '') {
      const res = await fetch(`${root}/_double/requests?request_id=${encodeURIComponent(requestID)}`);
      if (!res.ok) throw new Error(`/_double/requests answered ${res.status}`);
      return res.json();
    },
    async stop() {
      child.stdin.end();
      return within(exited(child), stopTimeoutMs, () => {
        child.kill('SIGKILL');
        return `upstreamdouble did not exit ${stopTimeoutMs} ms after its stdin closed`;
      });
    },
  };
}

/**
 * Starts the gateway with exactly env (plus PATH, FORWARD_HEADERS=X-Test-Scenario unless env
 * sets it, and LISTEN_ADDR=127.0.0.1:0 always;
 * nothing else of this process's environment leaks in, so a developer's own
 * OPENAI_API_KEY never turns a test into a real call). It reads the address
 * from the JSON log line "phasegate listening" on stderr.
 *
 * @returns {Promise<{root: string, logs: () => string, stop: () => Promise<{code: number|null, signal: string|null}>}>}
 */
export async function startGateway(env = {}) {
  const child = spawn(binaries().phasegate, [], {
    stdio: ['ignore', 'pipe', 'pipe'],
    // The upstream double picks its scenario from X-Test-Scenario, a header
    // the gateway passes upstream only when FORWARD_HEADERS names it.
    env: { PATH: process.env.PATH ?? '', FORWARD_HEADERS: 'X-Test-Scenario', ...env, LISTEN_ADDR: '127.0.0.1:0' },
  });
  own(child);
  let logs = '';
  let stdout = '';
  child.stdout.setEncoding('utf8').on('data', (s) => (stdout += s));
  const lines = createInterface({ input: child.stderr });
  const listening = new Promise((resolve, reject) => {
    lines.on('line', (line) => {
      logs += line + '\n';
      let rec;
      try {
        rec = JSON.parse(line);
      } catch {
        return;
      }
      if (rec.msg === 'phasegate listening') resolve(rec.addr);
    });
    child.once('exit', (code, signal) => reject(new Error(`phasegate exited (${code ?? signal}) before listening:\n${logs}${stdout}`)));
    child.once('error', reject);
  });
  const addr = await within(listening, startTimeoutMs, () => `phasegate logged no "phasegate listening" in ${startTimeoutMs} ms:\n${logs}`);
  if (!/^127\.0\.0\.1:\d+$/.test(addr ?? '')) {
    child.kill('SIGKILL');
    throw new Error(`phasegate listens on ${JSON.stringify(addr)}, want 127.0.0.1:PORT`);
  }
  return {
    root: `http://${addr}`,
    /** Everything the gateway logged so far (stderr, one JSON record a line). */
    logs: () => logs,
    /** Stops the gateway with SIGTERM (SIGKILL after a grace period). */
    async stop() {
      child.kill('SIGTERM');
      return within(exited(child), stopTimeoutMs, () => {
        child.kill('SIGKILL');
        return `phasegate did not exit ${stopTimeoutMs} ms after SIGTERM:\n${logs}`;
      });
    },
  };
}
