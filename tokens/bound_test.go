package tokens

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

// boundCases are messages built to be short in bytes and long in tokens:
// framing with hardly any text, calls as short as "{}", escapes, text
// that is not ASCII, keys spelled in other cases, content parts that are
// not text, invalid UTF-8.
var boundCases = []string{
	`{}`,
	`{"role":""}`,
	`{"role":"user","content":""}`,
	`{"role":"user","content":"a"}`,
	`{"role":"user","content":null}`,
	`{"role":"user","content":5}`,
	`{"role":"user","content":{"a":1}}`,
	`{"role":"user","name":"","content":""}`,
	`{"role":"user","name":"x","content":"y","x":"","y":"","z":""}`,
	`{"role":"assistant","tool_calls":[{},{},{},{},{},{},{},{}]}`,
	`{"role":"assistant","tool_calls":[{"function":{}},{"function":{"name":"a","arguments":"b"}}]}`,
	`{"role":"assistant","function_call":{}}`,
	`{"role":"assistant","function_call":{"name":"f","arguments":"{}"}}`,
	`{"role":"assistant","content":"","reasoning_content":""}`,
	`{"role":"assistant","content":"ok","reasoning_content":"think"}`,
	`{"role":"user","content":"\n\n\n\n\n\n\n\n\n\n\t\t\t\t"}`,
	`{"role":"user","content":"\u00e9\u00e8\u4e2d\u6587\ud83d\ude00\ud83d\ude00"}`,
	`{"role":"user","content":"中文中文中文，日本語、한국어 😀😀😀 ÆØÅ"}`,
	`{"role":"user","content":"1234567890123456789012345678901234567890"}`,
	`{"role":"user","content":"!@#$%^&*()_+{}|:<>?~` + "`" + `-=[]\\;',./"}`,
	`{"Role":"user","Content":"twice, if it were counted from its size"}`,
	`{"role":"user","CONTENT":"twice"}`,
	`{"role":"assistant","reaſoning_content":"the long s folds to s","content":""}`,
	`{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}`,
	`{"role":"user","content":[{"type":"text","text":"a"},{"type":"input_audio"},{"type":"file"}]}`,
	` { "role" : "user" , "content" : "spaced" } `,
	"{\"role\":\"user\",\"content\":\"\xff\xfe\xfd\xfc\xfb\xfa\"}",
}

// TestMessageBound: the bound FitBounded judges a message by is never
// below the count Fit would make of it, in both encodings, whatever the
// message spends its bytes on.
func TestMessageBound(t *testing.T) {
	long := `{"role":"tool","tool_call_id":"c1","content":"` + strings.Repeat("x", 3000) + `"}`
	checkBound(t, append(boundCases, long), (*chat.Message).UnmarshalJSON, (*Counter).messageBound, (*Counter).countMessage)
}

// checkBound checks bound against count in both encodings for the value
// decode takes from each of cases.
func checkBound[T any](t *testing.T, cases []string, decode func(*T, []byte) error, bound, count func(*Counter, *encoding, *T) int) {
	t.Helper()
	c := newCounter(t, DefaultConfig())
	for _, enc := range []string{EncodingO200K, EncodingCL100K} {
		e, err := loadEncoding(enc)
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range cases {
			var v T
			if err := decode(&v, []byte(raw)); err != nil {
				t.Fatalf("%s: %v", raw, err)
			}
			if b, n := bound(c, e, &v), count(c, e, &v); b < n {
				t.Errorf("%s, %s: bound %d < count %d", enc, raw, b, n)
			}
		}
	}
}

// FuzzMessageBound checks the bound against the count for any message.
func FuzzMessageBound(f *testing.F) {
	fuzzBound(f, boundCases, (*chat.Message).UnmarshalJSON, (*Counter).messageBound, (*Counter).countMessage)
}

// fuzzBound checks bound against count, in o200k_base, for any value
// decode takes from an input of at most 4 KiB, seeded with seeds.
func fuzzBound[T any](f *testing.F, seeds []string, decode func(*T, []byte) error, bound, count func(*Counter, *encoding, *T) int) {
	for _, raw := range seeds {
		f.Add(raw)
	}
	c := &Counter{cache: newCache(DefaultCacheBytes), seed: fuzzSeed}
	e, err := loadEncoding(EncodingO200K)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if len(raw) > 4096 {
			return
		}
		var v T
		if decode(&v, []byte(raw)) != nil {
			return
		}
		if b, n := bound(c, e, &v), count(c, e, &v); b < n {
			t.Errorf("%q: bound %d < count %d", raw, b, n)
		}
	})
}

// TestFitBounded: a request whose size shows it fits is kept whole
// without a call into tiktoken; one that may not fit is fitted as Fit
// fits it; what the bound skipped, CountPrompt counts as Fit would have.
func TestFitBounded(t *testing.T) {
	const model = "gpt-4o"
	tools := decodeTools(t, cookbookTools)
	small := (&history{tb: t}).text("sys", "system", 50).text("u1", "user", 300).call("call", "c1").
		result("r1", "c1", 800).text("u2", "user", 30)

	c := newCounter(t, DefaultConfig())
	for i := range tools { // tools are counted, and cached, as Fit counts them
		c.toolTokens(c.models.resolve(model).enc, &tools[i])
	}
	before := c.encodes.Load()
	f, err := c.FitBounded(model, small.msgs, tools, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Uncounted || f.PromptTokens != 0 || len(f.Messages) != len(small.msgs) {
		t.Errorf("small request: uncounted %v, %d tokens, %d of %d messages; want it kept whole, uncounted", f.Uncounted, f.PromptTokens, len(f.Messages), len(small.msgs))
	}
	if n := c.encodes.Load() - before; n != 0 {
		t.Errorf("small request: %d tiktoken calls, want 0", n)
	}
	counted, est := c.CountPrompt(model, small.msgs, tools)
	want, err := c.Fit(model, small.msgs, tools, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if counted != want.PromptTokens || est != want.Estimate {
		t.Errorf("CountPrompt = %d, %d; Fit counts %d, %d", counted, est, want.PromptTokens, want.Estimate)
	}

	// Capped below its size in bytes: counted, and truncated as Fit does.
	capped := capFor(t, c, model, counted*3/4)
	got, err := c.FitBounded(model, small.msgs, tools, 0, capped)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := c.Fit(model, small.msgs, tools, 0, capped)
	if err != nil {
		t.Fatal(err)
	}
	if got.Uncounted || got.PromptTokens != ref.PromptTokens || got.DroppedMessages != ref.DroppedMessages || got.DroppedMessages == 0 {
		t.Errorf("capped request: uncounted %v, %d tokens, %d dropped; Fit: %d tokens, %d dropped (want some)",
			got.Uncounted, got.PromptTokens, got.DroppedMessages, ref.PromptTokens, ref.DroppedMessages)
	}
}

// TestFitBoundedAgreesWithFit: on random histories and budgets, FitBounded
// keeps a request whole without counting only when Fit keeps it whole,
// and otherwise returns what Fit returns.
func TestFitBoundedAgreesWithFit(t *testing.T) {
	const model = "gpt-4o"
	c := newCounter(t, DefaultConfig())
	rng := rand.New(rand.NewPCG(14, 0x9e3779b97f4a7c15))
	uncounted, counted := 0, 0
	for range 200 {
		h := randomHistory(t, rng)
		total := sum(c, model, h.msgs, nil)
		// Caps from half the count to ten times it, the window's budget
		// at most: the bound passes requests of a fifth of the cap or so.
		raw := min(max(1, total*(50+rng.IntN(1000))/100), 100_000)
		capped := capFor(t, c, model, raw)
		fresh := newCounter(t, DefaultConfig()) // nothing cached: the bound judges by size
		got, gerr := fresh.FitBounded(model, h.msgs, nil, 0, capped)
		want, werr := c.Fit(model, h.msgs, nil, 0, capped)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("cap %d: FitBounded error %v, Fit error %v", capped, gerr, werr)
		}
		if gerr != nil {
			continue
		}
		if got.Uncounted {
			uncounted++
			if want.DroppedMessages != 0 || want.Shortened != 0 {
				t.Fatalf("cap %d, %d tokens: FitBounded kept the request whole, Fit drops %d", capped, total, want.DroppedMessages)
			}
			continue
		}
		counted++
		if got.PromptTokens != want.PromptTokens || got.DroppedMessages != want.DroppedMessages {
			t.Fatalf("cap %d: FitBounded %d tokens, %d dropped; Fit %d, %d", capped, got.PromptTokens, got.DroppedMessages, want.PromptTokens, want.DroppedMessages)
		}
	}
	if uncounted == 0 || counted == 0 {
		t.Errorf("%d requests kept uncounted, %d counted: want some of each", uncounted, counted)
	}
}

// toolBoundCases are tool definitions built to be short in bytes and long
// in tokens: many properties and enum items of a byte or two, properties
// that are null or have no type, schema keywords, escapes, text that is
// not ASCII, keys in other cases, a type that is not a function,
// parameters that are not an object, invalid UTF-8.
var toolBoundCases = []string{
	`{}`,
	`{"type":"function"}`,
	`{"type":"function","function":{}}`,
	`{"type":"function","function":{"name":""}}`,
	`{"type":"function","function":{"name":"f","parameters":{}}}`,
	`{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}`,
	`{"type":"function","function":{"name":"f","parameters":{"properties":{"a":{},"b":{},"c":{},"d":{},"e":{},"f":{}}}}}`,
	`{"type":"function","function":{"name":"f","parameters":{"properties":{"a":null,"b":null,"c":null,"d":null,"e":null}}}}`,
	`{"type":"function","function":{"name":"f","parameters":{"properties":{"a":{"enum":[1,2,3,4,5,6,7,8,9,0]}}}}}`,
	`{"type":"function","function":{"name":"f","parameters":{"properties":{"a":{"enum":["","","","","",""]}}}}}`,
	`{"type":"function","function":{"name":"f","parameters":{"properties":{"a":{"enum":[[],{},null,true,false]}}}}}`,
	`{"type":"function","function":{"name":"f","parameters":{"properties":{"a":{"enum":{}}}}}}`,
	`{"type":"function","function":{"name":"f","parameters":{"properties":{"a":{"type":["string","null"],"minimum":1,"x":{},"y":[]}}}}}`,
	`{"type":"function","function":{"name":"f","parameters":{"properties":[1,2,3]}}}`,
	`{"type":"function","function":{"name":"f","parameters":{"required":["a"],"additionalProperties":false,"$defs":{"a":{},"b":[]}}}}`,
	`{"type":"function","function":{"name":"f","parameters":"not an object"}}`,
	`{"type":"function","function":{"name":"f","description":".","parameters":{"properties":{"a":{"description":"."}}}}}`,
	`{"type":"function","function":{"name":"\u00e9\u4e2d\ud83d\ude00","description":"\n\n\n\n\t\t\t\t","parameters":{"properties":{"\u00e9":{"type":"\u4e2d"}}}}}`,
	`{"type":"function","function":{"name":"中文","description":"中文中文，日本語、한국어 😀😀 ÆØÅ 1234567890","parameters":{"properties":{"ключ":{"type":"строка"}}}}}`,
	`{"type":"function","function":{"NAME":"f","Description":"folded keys","Parameters":{"properties":{"a":{"TYPE":"string"}}}}}`,
	`{"type":"custom","custom":{"name":"g","format":{"type":"grammar"}}}`,
	` { "type" : "function" , "function" : { "name" : "spaced" , "parameters" : { "properties" : { "a" : { "type" : "string" } } } } } `,
	"{\"type\":\"function\",\"function\":{\"name\":\"\xff\xfe\",\"description\":\"\xfd\xfc\xfb\"}}",
}

// TestToolBound: the bound FitBounded judges a tool definition by is never
// below the count Fit would make of it, in both encodings, whatever the
// definition spends its bytes on.
func TestToolBound(t *testing.T) {
	// An enum of a thousand digits: each item costs its framing, 3
	// tokens, for two bytes.
	digits := strings.Repeat("1,", 999) + "1"
	cases := append([]string(nil), toolBoundCases...)
	cases = append(cases, `{"type":"function","function":{"name":"f","parameters":{"properties":{"a":{"enum":[`+digits+`]}}}}}`)
	var cookbook []json.RawMessage
	if err := json.Unmarshal([]byte(cookbookTools), &cookbook); err != nil {
		t.Fatal(err)
	}
	for _, raw := range cookbook {
		cases = append(cases, string(raw))
	}
	checkBound(t, cases, (*chat.Tool).UnmarshalJSON, (*Counter).toolBound, (*Counter).countTool)
}

// FuzzToolBound checks the bound against the count for any tool
// definition.
func FuzzToolBound(f *testing.F) {
	seeds := append([]string{`{"function":{"parameters":{"properties":{"a":{"enum":[` + strings.Repeat("1,", 99) + `1]}}}}}`}, toolBoundCases...)
	fuzzBound(f, seeds, (*chat.Tool).UnmarshalJSON, (*Counter).toolBound, (*Counter).countTool)
}

// TestFitBoundedLoadsNoTokenizer: a small request with tool definitions
// never counted before is kept whole without a call into tiktoken: the
// definitions are bounded by their size as the messages are, so a
// request that fits by its size loads no tokenizer's tables.
func TestFitBoundedLoadsNoTokenizer(t *testing.T) {
	const model = "gpt-4o"
	tools := decodeTools(t, cookbookTools)
	small := (&history{tb: t}).text("sys", "system", 50).text("u1", "user", 300).text("u2", "user", 30)
	c := newCounter(t, DefaultConfig())
	f, err := c.FitBounded(model, small.msgs, tools, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Uncounted || len(f.Messages) != len(small.msgs) {
		t.Errorf("uncounted %v, %d of %d messages; want it kept whole, uncounted", f.Uncounted, len(f.Messages), len(small.msgs))
	}
	if n := c.encodes.Load(); n != 0 {
		t.Errorf("%d tiktoken calls, want 0", n)
	}
	// Once counted, the definitions come from the cache: a request whose
	// messages were all counted too gets its exact count for free.
	counted, _ := c.CountPrompt(model, small.msgs, tools)
	before := c.encodes.Load()
	f, err = c.FitBounded(model, small.msgs, tools, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Uncounted || f.PromptTokens != counted || c.encodes.Load() != before {
		t.Errorf("counted before: uncounted %v, %d tokens (want %d), %d tiktoken calls (want 0)", f.Uncounted, f.PromptTokens, counted, c.encodes.Load()-before)
	}
}
