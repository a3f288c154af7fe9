// Package store holds the state that outlives one request and that every
// replica of the gateway must share: the reasoning remembered for
// DeepSeek's thinking mode, the rate limits, and the events of resumable
// streams. Each has an in-memory form, the default of a single gateway,
// and a Redis form for several replicas (REDIS_URL).
//
// The package knows nothing of HTTP or of the gateway's routes: the proxy
// depends on it, never the reverse. Every method that talks to Redis
// takes a context and returns its error wrapped with what it was doing;
// deciding what a failure means (degrade, answer 503, fail open) is the
// caller's.
package store
