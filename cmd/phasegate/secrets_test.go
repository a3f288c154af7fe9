package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The secrets of TestNoSecretLeaks, one of each shape: an sk- key, a gsk_
// key, a key with no prefix, a key with characters JSON escapes (and
// HTML-safe JSON escapes again), an admin key, a Redis password, and the
// key that seals reasoning (32 bytes in base64). Each
// holds a run of letters and digits (its core) that no escaping changes
// and no other text holds: a core found anywhere is a leak, however the
// key was written.
var leakSecrets = []struct{ value, core string }{
	{"sk-ds-Kq7Rz2Lm9Xw4Pb8Nc3Vt", "Kq7Rz2Lm9Xw4Pb8Nc3Vt"},
	{"gsk_Hn5Jd8Qs2Wf6Ty1Ue9Ra", "Hn5Jd8Qs2Wf6Ty1Ue9Ra"},
	{"Mv3Bx7Cz1Nq5Lp9Kw2Jh4G", "Mv3Bx7Cz1Nq5Lp9Kw2Jh4G"},
	{"pg+<Yt6Er8Wq3Zk&Ui0Op>-Sd3Fg-Hj5", "Yt6Er8Wq3Zk"},
	{"adm-Zx4Cv6Bn8Mm1Aa3Ss5", "Zx4Cv6Bn8Mm1Aa3Ss5"},
	{"rp-Gg7Hh9Jj2Kk4Ll6Dd8", "Gg7Hh9Jj2Kk4Ll6Dd8"},
	{"Rq4Tz8Wn2Yp6Lc9Vb3Mx7Kd1Hs5Gf0Ja8Ue2Io6Pk4Q=", "Rq4Tz8Wn2Yp6Lc9Vb3Mx7Kd1Hs5Gf0Ja8Ue2Io6Pk4Q"},
}

// leakEcho writes every secret in every way an upstream may quote it
// back: as it is, with each character that is not a letter or a digit
// as \uXXXX (as JSON may escape it), and without its prefix.
func leakEcho() string {
	var b strings.Builder
	for _, s := range leakSecrets {
		b.WriteString(" key " + s.value + " escaped ")
		for _, c := range s.value {
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
				b.WriteRune(c)
			} else {
				fmt.Fprintf(&b, `\u%04x`, c)
			}
		}
		if i := strings.IndexAny(s.value, "-_"); i > 0 && strings.Trim(s.value[:i], "abcdefghijklmnopqrstuvwxyz") == "" {
			b.WriteString(" stripped " + s.value[i+1:])
		}
	}
	return b.String()
}

// leakyUpstream echoes every secret in every channel it has: its response
// headers (on success and failure), its error bodies, an error object in a
// 200 answer or inside a stream, SSE comments, the Location of a
// redirect. What it answers is chosen by a word in the request.
func leakyUpstream(t *testing.T) *httptest.Server {
	echo := leakEcho()
	// echo holds backslashes and '<', '&' as they are: a JSON string
	// keeps them, as an upstream quoting a key in a message would.
	errorJSON := `{"error":{"message":"Incorrect API key provided:` + echo + `","type":"invalid_request_error","code":"invalid_api_key"}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		for _, k := range []string{"X-Ratelimit-Limit-Requests", "Openai-Version", "Openai-Organization", "Set-Cookie", "X-Echo", "X-Request-Id"} {
			w.Header().Set(k, echo)
		}
		stream := bytes.Contains(body, []byte(`"stream":true`))
		has := func(word string) bool {
			return bytes.Contains(body, []byte(word)) || strings.Contains(r.URL.Path, word)
		}
		switch {
		case has("redirect"):
			w.Header().Set("Location", "https://elsewhere.example/v1?key="+leakSecrets[0].value)
			w.WriteHeader(http.StatusTemporaryRedirect)
			_, _ = io.WriteString(w, errorJSON)
		case has("error-body"), has("fail"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, errorJSON)
		case strings.HasSuffix(r.URL.Path, "/models"):
			w.Header().Set("Location", "https://elsewhere.example/models?"+echo)
			w.WriteHeader(http.StatusFound)
		case has("error-object") && !stream:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, errorJSON)
		case has("error-object"):
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, ":"+echo+"\n\ndata: "+errorJSON+"\n\n")
		case has("error-later") && stream:
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, ":"+echo+"\n\ndata: "+leakChunk(`"role":"assistant","content":"partial"`, "null")+"\n\n")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, ": keep-alive"+echo+"\n\ndata: "+errorJSON+"\n\n")
		case has("embeddings") || has("/models/"):
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
		case stream:
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, ":"+echo+"\n\ndata: "+leakChunk(`"role":"assistant","content":"fine"`, "null")+"\n\n: keep-alive "+echo+"\n\n"+
				"data: "+leakChunk(`"content":""`, `"stop"`)+"\n\ndata: [DONE]\n\n")
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"fine"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func leakChunk(delta, finish string) string {
	return `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{` + delta + `},"finish_reason":` + finish + `}]}`
}

// rawExchange sends one hand-written request to addr and returns all the
// bytes that came back (status line, headers, body as framed) and the
// body decoded from its framing: a key split across two chunks of a
// chunked body shows in the second only.
func rawExchange(t *testing.T, addr, method, path, auth, id, body string) (raw, decoded string, status int) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	req := method + " " + path + " HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\nX-Request-Id: " + id + "\r\n"
	if auth != "" {
		req += "Authorization: Bearer " + auth + "\r\n"
	}
	if body != "" {
		req += fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	if _, err := io.WriteString(conn, req+"\r\n"+body); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("%s %s: %v after %q", method, path, err, b)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
	if err != nil {
		t.Fatalf("%s %s: %v in %q", method, path, err, b)
	}
	d, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, path, err)
	}
	return string(b), string(d), resp.StatusCode
}

// TestNoSecretLeaks runs the gateway (two providers, client keys, the
// admin key, a Redis URL with a password, debug logs, spans written to
// the console) in front of an upstream that echoes every one of those
// secrets, in every spelling, in every channel it has; then it reads
// everything the clients got, byte for byte, and everything logged, and
// finds none of them.
func TestNoSecretLeaks(t *testing.T) {
	usrv := leakyUpstream(t)
	s := func(i int) string { return leakSecrets[i].value }
	g := start(t, nil, map[string]string{
		"PROVIDERS": "deepseek,openai", "DEEPSEEK_BASE_URL": usrv.URL, "DEEPSEEK_API_KEY": s(0), "OPENAI_BASE_URL": usrv.URL, "OPENAI_API_KEY": s(1),
		"PHASEGATE_API_KEYS": s(2) + ":proj-a," + s(3) + ":proj-b", "ADMIN_API_KEY": s(4),
		"REDIS_URL": "redis://default:" + s(5) + "@127.0.0.1:1/0", "REASONING_KEY": s(6), "UPSTREAM_RETRIES": "0",
		"LOG_LEVEL": "debug", "OTEL_TRACES_EXPORTER": "console",
	})
	type exchange struct {
		name, method, path, auth, body string
		status                         int
		// redacted: the upstream's echo reaches the client, so a marker
		// must show in place of the secrets.
		redacted bool
		want     string // also in the body
	}
	var cases []exchange
	chatBody := func(stream bool, word string) string {
		return fmt.Sprintf(`{"model":"deepseek-v4-flash","stream":%t,"messages":[{"role":"user","content":"%s"}]}`, stream, word)
	}
	for _, route := range []string{"/v1", "/standard/v1"} {
		for i, stream := range []bool{false, true} {
			key := s(2 + i)
			cases = append(cases,
				exchange{name: "upstream error body", body: chatBody(stream, "error-body"), status: 401, redacted: true},
				// A stream's first comment commits it: the error is then
				// in-band.
				exchange{name: "error object in a 200", body: chatBody(stream, "error-object"), status: map[bool]int{false: 502, true: 200}[stream],
					redacted: true, want: "upstream_invalid_response"},
				exchange{name: "upstream redirect", body: chatBody(stream, "redirect"), status: 502, want: "upstream_redirect"},
				exchange{name: "headers and comments of a success", body: chatBody(stream, "hello"), status: 200, redacted: true, want: "fine"},
			)
			if stream {
				cases = append(cases, exchange{name: "error inside a started stream", body: chatBody(stream, "error-later"), status: 200, redacted: true, want: `"error"`})
			}
			for j := range cases {
				if cases[j].path == "" {
					cases[j].method, cases[j].path, cases[j].auth = http.MethodPost, route+"/chat/completions", key
					cases[j].name = fmt.Sprintf("%s %s stream=%t", cases[j].name, route, stream)
				}
			}
		}
	}
	cases = append(cases,
		exchange{name: "models, every provider redirects", method: http.MethodGet, path: "/v1/models", auth: s(2), status: 502, want: "upstream_redirect"},
		exchange{name: "pass-through error body, embeddings", method: http.MethodPost, path: "/v1/embeddings", auth: s(3), body: `{"model":"fail","input":"x"}`, status: 401, redacted: true},
		exchange{name: "pass-through success headers, embeddings", method: http.MethodPost, path: "/v1/embeddings", auth: s(2), body: `{"model":"text-embedding-3-small","input":"x"}`, status: 200, redacted: true},
		exchange{name: "pass-through error body, a model", method: http.MethodGet, path: "/v1/models/fail-model", auth: s(2), status: 401, redacted: true},
		exchange{name: "pass-through redirect", method: http.MethodGet, path: "/v1/models/redirect", auth: s(2), status: 502, want: "upstream_redirect"},
		exchange{name: "a wrong client key", method: http.MethodPost, path: "/v1/chat/completions", auth: "sk-wrong-key-000000", body: chatBody(false, "hello"), status: 401},
	)
	for i, c := range cases {
		raw, body, status := rawExchange(t, g.addr, c.method, c.path, c.auth, fmt.Sprintf("leak-%d", i), c.body)
		if status != c.status || (c.redacted && !strings.Contains(raw, "[redacted]")) || !strings.Contains(body, c.want) {
			t.Errorf("%s: status %d, want %d with %q (redacted: %t), got:\n%s", c.name, status, c.status, c.want, c.redacted, raw)
		}
		findLeaks(t, c.name, raw+"\n"+body)
	}
	// The trace events kept of every request, with what the guard and
	// the upstream errors said.
	for i, c := range cases {
		raw, body, _ := rawExchange(t, g.addr, http.MethodGet, fmt.Sprintf("/debug/requests/leak-%d", i), s(4), "debug", "")
		findLeaks(t, "/debug of "+c.name, raw+"\n"+body)
	}
	raw, body, _ := rawExchange(t, g.addr, http.MethodGet, "/metrics", "", "metrics", "")
	findLeaks(t, "/metrics", raw+"\n"+body)
	// A client that sends its own key as its request id: the id is in
	// every log line and span of the request.
	raw, body, _ = rawExchange(t, g.addr, http.MethodPost, "/v1/chat/completions", s(2), s(2), chatBody(true, "hello"))
	findLeaks(t, "a key as the request id", raw+"\n"+body)
	if err := g.stop(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.log.String(), "gen_ai.operation.name") || !strings.Contains(g.log.String(), "upstream") {
		t.Errorf("the log holds no spans or no upstream failure: the test would look at less than it says")
	}
	findLeaks(t, "the log and spans", g.log.String())
}

// findLeaks reports each secret whose core text holds.
func findLeaks(t *testing.T, where, text string) {
	t.Helper()
	for _, s := range leakSecrets {
		if i := strings.Index(text, s.core); i >= 0 {
			t.Errorf("%s: holds the secret %s… at %q", where, s.value[:6], text[max(0, i-150):min(len(text), i+50)])
		}
	}
}
