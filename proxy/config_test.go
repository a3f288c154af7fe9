package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func validConfig() Config {
	return Config{Providers: []Provider{
		{Name: "deepseek", BaseURL: "https://api.deepseek.com"},
		{Name: "openai", BaseURL: "https://api.openai.com/v1", APIKey: "sk-x"},
	}}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*Config)
		errors int // how many problems are reported; 0 means valid
	}{
		{name: "valid", edit: func(*Config) {}},
		{name: "valid with routes and timeouts", edit: func(c *Config) {
			c.Routes = []Route{{Pattern: "bge-*", Provider: "deepseek"}}
			c.Timeouts = DefaultTimeouts()
		}},
		{name: "no provider", edit: func(c *Config) { c.Providers = nil }, errors: 1},
		{name: "unnamed provider", edit: func(c *Config) { c.Providers[0].Name = "" }, errors: 1},
		{name: "duplicate provider", edit: func(c *Config) { c.Providers[1].Name = "deepseek" }, errors: 1},
		{name: "bad scheme", edit: func(c *Config) { c.Providers[0].BaseURL = "ftp://api.deepseek.com" }, errors: 1},
		{name: "no host", edit: func(c *Config) { c.Providers[0].BaseURL = "https:///v1" }, errors: 1},
		{name: "not a URL", edit: func(c *Config) { c.Providers[0].BaseURL = "://" }, errors: 1},
		{name: "query", edit: func(c *Config) { c.Providers[0].BaseURL = "https://h/v1?key=x" }, errors: 1},
		{name: "route without pattern", edit: func(c *Config) { c.Routes = []Route{{Provider: "openai"}} }, errors: 1},
		{name: "route to an unknown provider", edit: func(c *Config) { c.Routes = []Route{{Pattern: "x", Provider: "azure"}} }, errors: 1},
		{name: "negative body limit", edit: func(c *Config) { c.MaxBodyBytes = -1 }, errors: 1},
		{name: "negative event limit", edit: func(c *Config) { c.MaxEventBytes = -1 }, errors: 1},
		{name: "negative timeouts", edit: func(c *Config) {
			c.Timeouts = Timeouts{Connect: -1, FirstByte: -1, Idle: -1, Request: -1}
		}, errors: 4},
		{name: "every problem reported", edit: func(c *Config) {
			c.Providers[0].BaseURL = "nope"
			c.MaxBodyBytes = -5
		}, errors: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.edit(&c)
			err := c.Validate()
			if tt.errors == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want an ErrInvalidConfig", err)
			}
			var joined interface{ Unwrap() []error }
			n := 1
			if errors.As(err, &joined) {
				n = len(joined.Unwrap())
			}
			if n != tt.errors {
				t.Errorf("Validate reported %d problems (%v), want %d", n, err, tt.errors)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	got := Config{}.WithDefaults()
	if got.MaxBodyBytes != 16<<20 || got.MaxEventBytes != 8<<20 || got.MaxResponseBytes != 64<<20 {
		t.Errorf("defaults = body %d, event %d, response %d; want 16 MiB, 8 MiB, 64 MiB", got.MaxBodyBytes, got.MaxEventBytes, got.MaxResponseBytes)
	}
	set := Config{MaxBodyBytes: 1, MaxEventBytes: 2, MaxResponseBytes: 3}.WithDefaults()
	if set.MaxBodyBytes != 1 || set.MaxEventBytes != 2 || set.MaxResponseBytes != 3 {
		t.Errorf("WithDefaults overwrote set values: %+v", set)
	}
}

func TestProviderRouting(t *testing.T) {
	three := []Provider{{Name: "local", BaseURL: "http://127.0.0.1:1"}, {Name: "deepseek", BaseURL: "http://127.0.0.1:2"}, {Name: "openai", BaseURL: "http://127.0.0.1:3"}}
	tests := []struct {
		name      string
		providers []Provider
		routes    []Route
		model     string
		want      string
	}{
		{name: "deepseek prefix", providers: three, model: "deepseek-v4-flash", want: "deepseek"},
		{name: "other to openai", providers: three, model: "gpt-5", want: "openai"},
		{name: "exact route", providers: three, routes: []Route{{Pattern: "gpt-5", Provider: "local"}}, model: "gpt-5", want: "local"},
		{name: "exact route does not match a prefix", providers: three, routes: []Route{{Pattern: "gpt", Provider: "local"}}, model: "gpt-5", want: "openai"},
		{name: "prefix route", providers: three, routes: []Route{{Pattern: "deepseek-*", Provider: "openai"}}, model: "deepseek-v4-pro", want: "openai"},
		{name: "first matching route wins", providers: three, routes: []Route{{Pattern: "q*", Provider: "local"}, {Pattern: "qwen", Provider: "deepseek"}}, model: "qwen", want: "local"},
		{name: "catch-all route", providers: three, routes: []Route{{Pattern: "*", Provider: "local"}}, model: "deepseek-v4-pro", want: "local"},
		{name: "no deepseek provider", providers: three[2:], model: "deepseek-v4-flash", want: "openai"},
		{name: "neither: the first provider", providers: three[:1], model: "gpt-5", want: "local"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{Providers: tt.providers, Routes: tt.routes}
			if got := c.provider(tt.model).Name; got != tt.want {
				t.Errorf("provider(%q) = %q, want %q", tt.model, got, tt.want)
			}
		})
	}
}

func TestEndpoint(t *testing.T) {
	tests := []struct {
		name, base, path, want string
	}{
		{name: "root", base: "https://api.deepseek.com", path: "/chat/completions", want: "https://api.deepseek.com/chat/completions"},
		{name: "v1", base: "https://api.openai.com/v1", path: "/chat/completions", want: "https://api.openai.com/v1/chat/completions"},
		{name: "trailing slash", base: "http://127.0.0.1:8/v1/", path: "/models", want: "http://127.0.0.1:8/v1/models"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := endpoint(tt.base, tt.path); got != tt.want {
				t.Errorf("endpoint(%q, %q) = %q, want %q", tt.base, tt.path, got, tt.want)
			}
		})
	}
}

// TestSecretRedacts checks a key never shows however it is printed.
func TestSecretRedacts(t *testing.T) {
	const key = "sk-live-1234567890"
	p := Provider{Name: "openai", BaseURL: "https://api.openai.com/v1", APIKey: key}
	c := Config{Providers: []Provider{p}}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "key", p.APIKey, "provider", p)
	j, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, got string
	}{
		{name: "%v", got: fmt.Sprintf("%v", c)},
		{name: "%+v", got: fmt.Sprintf("%+v", c)},
		{name: "%#v", got: fmt.Sprintf("%#v", c)},
		//lint:ignore S1025 the row checks what fmt prints for %s, whatever methods Secret has
		{name: "%s", got: fmt.Sprintf("%s", p.APIKey)},
		{name: "json", got: string(j)},
		{name: "slog", got: logged.String()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Contains(tt.got, key) {
				t.Errorf("%s shows the key: %s", tt.name, tt.got)
			}
		})
	}
	if p.APIKey.Reveal() != key {
		t.Errorf("Reveal = %q, want the key", p.APIKey.Reveal())
	}
	if Secret("").String() != "" {
		t.Errorf("an empty secret prints %q, want empty", Secret("").String())
	}
}

func TestNewTransport(t *testing.T) {
	to := Timeouts{Connect: 3 * time.Second, FirstByte: 7 * time.Second}
	tr := NewTransport(to)
	if tr.TLSHandshakeTimeout != to.Connect {
		t.Errorf("TLSHandshakeTimeout = %v, want the connect timeout %v", tr.TLSHandshakeTimeout, to.Connect)
	}
	if tr.ResponseHeaderTimeout != to.FirstByte {
		t.Errorf("ResponseHeaderTimeout = %v, want the first-byte timeout %v", tr.ResponseHeaderTimeout, to.FirstByte)
	}
	if tr.DialContext == nil {
		t.Error("no DialContext: the connect timeout is not applied")
	}
	if tr.Proxy == nil {
		t.Error("no Proxy: HTTPS_PROXY is ignored")
	}
}
