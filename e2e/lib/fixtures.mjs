// What the upstream double (e2e/upstreamdouble/main.go) answers, scenario by
// scenario. The Go file holds the same values: change both together.

/** Content of the "text" scenario, one delta each (a keep-alive comment after the third). */
export const textPieces = ['Hello', ', ', 'wörld', '! ', '🚀', ' done.'];
export const text = textPieces.join('');

/** The "reasoning" scenario: reasoning_content deltas, then one content delta. */
export const reasoningPieces = ['The user ', 'wants ', 'a check.'];
export const reasoning = reasoningPieces.join('');
export const reasoningAnswer = 'Checked.';

/**
 * The "tool-call" scenario: one call whose arguments arrive in ten fragments
 * split inside keys, numbers, escapes and non-ASCII text. The odd spacing,
 * key order and 2.50 must reach the client byte for byte.
 */
export const toolCall = {
  id: 'call_e2e_0001',
  name: 'get_weather',
  arguments: String.raw`{"city": "Zürich", "when":{"days":3,"from":"2026-01-01"},"units":"metric" ,"limit":2.50,"note":"say \"hi\"\n\tthen ☃ 🚀 <b>&amp;</b>","tags":[],"extra":null}`,
};
export const toolCallArgs = {
  city: 'Zürich',
  when: { days: 3, from: '2026-01-01' },
  units: 'metric',
  limit: 2.5,
  note: 'say "hi"\n\tthen ☃ 🚀 <b>&amp;</b>',
  tags: [],
  extra: null,
};
export const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather forecast for a city.',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, units: { type: 'string', enum: ['metric', 'imperial'] } },
      required: ['city'],
    },
  },
};

/** The "duplicate" scenario's text answer, once the gateway refused its repeated call. */
export const duplicateAnswer = 'Using the earlier result: sunny.';

/** Usage of every scenario, with DeepSeek's cache fields and OpenAI's details. */
export const usage = {
  prompt_tokens: 11,
  completion_tokens: 7,
  total_tokens: 18,
  prompt_cache_hit_tokens: 5,
  prompt_cache_miss_tokens: 6,
  completion_tokens_details: { reasoning_tokens: 3 },
};

/** The "rate-limit" scenario's error. */
export const rateLimit = { status: 429, code: 'rate_limit_exceeded', type: 'requests', retryAfter: '60' };

/** What GET /v1/models of the double lists. */
export const models = ['e2e-model-a', 'e2e-model-b'];

/**
 * The "history" scenario answers with what the double received, as JSON
 * content: {messages: N, prompt_tokens: T}, T being the o200k_base count of
 * the messages and tools (the gateway's own count for gpt-4o and models
 * configured with o200k_base), also reported as usage.prompt_tokens.
 */
export const historySummary = (content) => JSON.parse(content);
