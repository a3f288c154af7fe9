// The coding-agent CLIs the suite runs, each pointed at the gateway by its
// own documented configuration (environment or config file, nothing
// patched), headless, with telemetry and update checks off, in a scratch
// directory whose HOME is its own.
//
// An agent is {id, name, pkg, bin, wire, capFlag, prepare, shown}:
//   - wire: the API it speaks (chat completions, responses, messages);
//   - prepare({home, project, base, key, model, cap, prompt}) writes its
//     config files and returns {args, env}; base is the gateway's base URL
//     for the wire ({root}/v1 or {root}/standard/v1, or the root for
//     Messages); cap, when set, is the turn limit of an unguarded run, given
//     by the agent's own flag or setting (null when it has none);
//   - shown(stdout) returns {text, error}: the final answer the agent showed,
//     read from its JSON output, or the error it reported.

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const here = path.resolve(import.meta.dirname, '..');
const binDir = path.join(here, 'node_modules', '.bin');

/** The version the lockfile installed for pkg. */
export function installedVersion(pkg) {
  const file = path.join(here, 'node_modules', pkg, 'package.json');
  return JSON.parse(readFileSync(file, 'utf8')).version;
}

/** The executable of an agent, as npm ci linked it. */
export function binary(agent) {
  return path.join(binDir, agent.bin);
}

function writeJSON(file, value) {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(value, null, 2) + '\n');
}

/** Parses output holding one JSON value per line; other lines are skipped. */
function jsonLines(stdout) {
  const out = [];
  for (const line of stdout.split('\n')) {
    const t = line.trim();
    if (!t.startsWith('{') && !t.startsWith('[')) continue;
    try {
      out.push(JSON.parse(t));
    } catch {
      // a line of text that starts like JSON
    }
  }
  return out;
}

// Qwen Code: the OpenAI-compatible auth type, with OPENAI_BASE_URL,
// OPENAI_API_KEY and OPENAI_MODEL (docs/users/configuration/auth.md), and
// ~/.qwen/settings.json turning off the update check
// (general.enableAutoUpdate), usage statistics
// (privacy.usageStatisticsEnabled) and telemetry (telemetry.enabled).
// `qwen PROMPT --yolo --output-format json` runs one headless session;
// --max-session-turns caps an unguarded one.
const qwen = {
  id: 'qwen-code',
  name: 'Qwen Code',
  pkg: '@qwen-code/qwen-code',
  bin: 'qwen',
  wire: 'chat',
  prepare({ home, base, key, model, cap, prompt }) {
    writeJSON(path.join(home, '.qwen', 'settings.json'), {
      general: { enableAutoUpdate: false },
      privacy: { usageStatisticsEnabled: false },
      telemetry: { enabled: false },
      security: { auth: { selectedType: 'openai' } },
      model: { name: model },
    });
    const args = [prompt, '--yolo', '--output-format', 'json'];
    if (cap) args.push('--max-session-turns', String(cap));
    return { args, env: { OPENAI_BASE_URL: base, OPENAI_API_KEY: key, OPENAI_MODEL: model } };
  },
  shown(stdout) {
    // One JSON array of events; the last "result" event holds the answer.
    const events = jsonLines(stdout).flat();
    const result = events.findLast((e) => e?.type === 'result');
    if (!result) return { text: '', error: 'no result event in its output' };
    return { text: String(result.result ?? ''), error: result.is_error ? String(result.error?.message ?? result.result ?? 'is_error') : '' };
  },
};

// OpenCode: a provider of its own in ~/.config/opencode/opencode.json on
// the bundled @ai-sdk/openai-compatible package (opencode.ai/docs/providers,
// "Custom provider"), autoupdate off and sharing disabled in the same file,
// and OPENCODE_DISABLE_AUTOUPDATE and OPENCODE_DISABLE_MODELS_FETCH (no
// models.dev catalogue) in the environment. At start OpenCode also installs
// its plugin SDK into its config directory from the npm registry; npm's own
// offline setting (npm_config_offline) makes that fail at once instead,
// which OpenCode logs and ignores: nothing is downloaded at run time.
// `opencode run --format json PROMPT` runs one headless session. Its agents'
// `steps` limit did not end a model that keeps calling tools (53 steps with
// steps = 3), so the runner's cap bounds an unguarded run.
const opencode = {
  id: 'opencode',
  name: 'OpenCode',
  pkg: 'opencode-ai',
  bin: 'opencode',
  wire: 'chat',
  prepare({ home, base, model, prompt }) {
    const config = {
      $schema: 'https://opencode.ai/config.json',
      autoupdate: false,
      share: 'disabled',
      provider: {
        phasegate: {
          npm: '@ai-sdk/openai-compatible',
          name: 'phasegate',
          options: { baseURL: base, apiKey: '{env:PHASEGATE_API_KEY}' },
          models: { [model]: { name: model } },
        },
      },
      model: `phasegate/${model}`,
      small_model: `phasegate/${model}`,
    };
    writeJSON(path.join(home, '.config', 'opencode', 'opencode.json'), config);
    return {
      args: ['run', '--format', 'json', prompt],
      env: { OPENCODE_DISABLE_AUTOUPDATE: 'true', OPENCODE_DISABLE_MODELS_FETCH: 'true', npm_config_offline: 'true' },
    };
  },
  shown(stdout) {
    // One JSON event a line; the answer is the last text part.
    const events = jsonLines(stdout);
    const error = events.findLast((e) => e?.type === 'error');
    const text = events.findLast((e) => e?.type === 'text')?.part?.text ?? '';
    return { text, error: error ? JSON.stringify(error.error ?? error).slice(0, 300) : '' };
  },
};

// Claude Code: ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY, the model in
// ANTHROPIC_MODEL and for its small tasks in ANTHROPIC_DEFAULT_HAIKU_MODEL;
// CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC (which covers
// DISABLE_TELEMETRY, DISABLE_ERROR_REPORTING and DISABLE_AUTOUPDATER, set
// too). `claude -p PROMPT --output-format json` runs one headless session;
// --allowedTools lets Bash and Read run without a prompt (root may not use
// --dangerously-skip-permissions), --max-turns caps an unguarded one.
const claude = {
  id: 'claude-code',
  name: 'Claude Code',
  pkg: '@anthropic-ai/claude-code',
  bin: 'claude',
  wire: 'messages',
  prepare({ base, key, model, cap, prompt }) {
    const args = ['-p', prompt, '--output-format', 'json', '--allowedTools', 'Bash,Read'];
    if (cap) args.push('--max-turns', String(cap));
    return {
      args,
      env: {
        ANTHROPIC_BASE_URL: base,
        ANTHROPIC_API_KEY: key,
        ANTHROPIC_MODEL: model,
        ANTHROPIC_DEFAULT_HAIKU_MODEL: model,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        DISABLE_TELEMETRY: '1',
        DISABLE_ERROR_REPORTING: '1',
        DISABLE_AUTOUPDATER: '1',
      },
    };
  },
  shown(stdout) {
    const result = jsonLines(stdout).findLast((e) => e?.type === 'result');
    if (!result) return { text: '', error: 'no result in its output' };
    return { text: String(result.result ?? ''), error: result.is_error ? String(result.result ?? result.subtype) : '' };
  },
};

// Codex: a model provider of its own in $CODEX_HOME/config.toml with
// wire_api = "responses" and env_key naming the variable that holds the
// key; check_for_update_on_startup = false and analytics off in the same
// file. `codex exec --json --skip-git-repo-check PROMPT` runs one headless
// session, approval_policy = "never" lets its commands run; it has no turn
// flag, so the runner's execution cap bounds an unguarded run.
const codex = {
  id: 'codex',
  name: 'Codex',
  pkg: '@openai/codex',
  bin: 'codex',
  wire: 'responses',
  prepare({ home, base, model, prompt }) {
    const codexHome = path.join(home, '.codex');
    mkdirSync(codexHome, { recursive: true });
    writeFileSync(
      path.join(codexHome, 'config.toml'),
      [
        `model = ${JSON.stringify(model)}`,
        'model_provider = "phasegate"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        'check_for_update_on_startup = false',
        '',
        '[analytics]',
        'enabled = false',
        '',
        '[model_providers.phasegate]',
        'name = "phasegate"',
        `base_url = ${JSON.stringify(base)}`,
        'env_key = "PHASEGATE_API_KEY"',
        'wire_api = "responses"',
        '',
      ].join('\n'),
    );
    return { args: ['exec', '--json', '--skip-git-repo-check', prompt], env: { CODEX_HOME: codexHome } };
  },
  shown(stdout) {
    const events = jsonLines(stdout);
    const failed = events.findLast((e) => e?.type === 'turn.failed' || e?.type === 'error');
    const message = events.findLast((e) => e?.type === 'item.completed' && e.item?.type === 'agent_message');
    return { text: message?.item?.text ?? '', error: failed ? JSON.stringify(failed.error ?? failed.message ?? failed).slice(0, 300) : '' };
  },
};

/** Every agent the suite knows, by id, in table order. */
export const agents = { 'claude-code': claude, codex, 'qwen-code': qwen, opencode };
