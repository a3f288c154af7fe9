package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
)

// environ lists the process's environment; the unknown-variable warning
// reads it.
var environ = os.Environ

// strayVariable is a variable of the environment that looks meant for the
// gateway but names none of its settings.
type strayVariable struct {
	name    string
	suggest string // the nearest setting, "" when none is near
}

// strayVariables returns the variables of env (NAME=value items) that
// look meant for the gateway but name none of its settings: those whose
// first word is the first word of a setting (MAX_, RATE_LIMIT_, REDIS_...)
// and that are near a setting's name, and any PHASEGATE_ variable. A
// variable far from every setting (OPENAI_ORGANIZATION, LOG_FORMAT) is
// another program's, and left alone.
func strayVariables(env []string) []strayVariable {
	known := []string{"CONFIG", "PORT"}
	for alias := range aliases {
		known = append(known, alias)
	}
	prefixes := map[string]bool{}
	for _, s := range settings {
		known = append(known, s.env)
		prefixes[firstWord(s.env)] = true
	}
	var out []strayVariable
	for _, item := range env {
		name, _, _ := strings.Cut(item, "=")
		upper := strings.ToUpper(name)
		if name == "" || slices.Contains(known, name) || !prefixes[firstWord(upper)] {
			continue
		}
		suggest := strings.TrimSuffix(strings.TrimPrefix(didYouMean(name, known, ""), "; did you mean "), "?")
		if suggest == "" && !strings.HasPrefix(upper, "PHASEGATE_") {
			continue
		}
		out = append(out, strayVariable{name: name, suggest: suggest})
	}
	return out
}

func firstWord(name string) string {
	w, _, _ := strings.Cut(name, "_")
	return w
}

// logStart logs what an operator checks first: the address, the
// providers, the guard's effective budgets, and the variables of the
// environment that look like misspelt settings (their values are never
// logged: one may be a key).
func logStart(log *slog.Logger, o options, addr net.Addr) {
	for _, v := range strayVariables(environ()) {
		msg := "environment variable " + v.name + " is not a setting of the gateway and is ignored"
		if v.suggest != "" {
			msg += "; did you mean " + v.suggest + "?"
		}
		log.Warn(msg, "name", v.name, "did_you_mean", v.suggest)
	}
	names := make([]string, 0, len(o.proxy.Providers))
	for _, p := range o.proxy.Providers {
		names = append(names, p.Name)
	}
	if o.simulated {
		log.Warn("no provider configured: serving the built-in SIMULATED model for every model name; set DEEPSEEK_API_KEY or OPENAI_API_KEY (or PROVIDERS) to reach a real one")
	}
	log.Info("phasegate listening", "addr", addr.String(), "providers", names, "two_stage", o.twoStage)
	if p, ok := o.sources["PORT"]; ok {
		log.Info("listening on PORT, as LISTEN_ADDR is not set", "port", p.raw)
	}
	log.Info("guard budgets", "max_phase_cycles", o.budgets.maxPhaseCycles, "max_duplicate_attempts", o.budgets.maxDuplicateAttempts,
		"max_tools_per_tool_phase", o.budgets.maxToolsPerToolPhase, "max_envelope_retries", o.envelopeRetries,
		"repeatable_tools", o.repeatableTools, "plan_tools", o.planTools,
		"guard_profile", o.profile, "agent_max_phase_cycles", o.budgets.agentMaxPhaseCycles)
}

// listenError is the error of a listener that could not open, naming the
// setting that gave its address as written (LISTEN_ADDR, PORT, a flag or
// a file line), with what to do when another process holds the port.
func listenError(o options, err error) error {
	written := settingNamed("LISTEN_ADDR").written(o.sources["LISTEN_ADDR"])
	if p, ok := o.sources["PORT"]; ok {
		written = "PORT=" + p.raw
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s: cannot listen, the address is already in use (another process listens there: stop it, or set LISTEN_ADDR or PORT to a free port): %w", written, err)
	}
	return fmt.Errorf("%s: cannot listen: %w", written, err)
}
