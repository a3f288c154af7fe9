package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"syscall"

	"github.com/phasegate/phasegate/settings"
)

// environ lists the process's environment; the unknown-variable warning
// reads it.
var environ = os.Environ

// logStart logs what an operator checks first: the address, the
// providers, the guard in force (mode, profile, the rules per project
// and per model) and its budgets, and the variables of the
// environment that look like misspelt settings (their values are never
// logged: one may be a key).
func logStart(log *slog.Logger, o options, addr net.Addr) {
	for _, v := range settings.StrayVariables(environ()) {
		msg := "environment variable " + v.Name + " is not a setting of the gateway and is ignored"
		if v.Suggest != "" {
			msg += "; did you mean " + v.Suggest + "?"
		}
		log.Warn(msg, "name", v.Name, "did_you_mean", v.Suggest)
	}
	names := make([]string, 0, len(o.Proxy.Providers))
	for _, p := range o.Proxy.Providers {
		names = append(names, p.Name)
	}
	if o.Simulated {
		log.Warn("no provider configured: serving the built-in SIMULATED model for every model name; set DEEPSEEK_API_KEY or OPENAI_API_KEY (or PROVIDERS) to reach a real one")
	}
	log.Info("phasegate listening", "addr", addr.String(), "providers", names, "two_stage", o.TwoStage)
	if p, ok := o.Port(); ok {
		log.Info("listening on PORT, as LISTEN_ADDR is not set", "port", p)
	}
	effectiveGuard(o).log(log)
	log.Info("guard budgets", "max_phase_cycles", o.MaxPhaseCycles, "max_duplicate_attempts", o.MaxDuplicateAttempts,
		"max_tools_per_tool_phase", 1, "max_envelope_retries", o.EnvelopeRetries,
		"repeatable_tools", o.RepeatableTools, "plan_tools", o.PlanTools,
		"guard_profile", o.Profile, "agent_max_phase_cycles", o.AgentMaxPhaseCycles)
}

// listenError is the error of a listener that could not open, naming the
// setting that gave its address as written (LISTEN_ADDR, PORT, a flag or
// a file line), with what to do when another process holds the port.
func listenError(o options, err error) error {
	written := o.Written(settings.ListenAddr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s: cannot listen, the address is already in use (another process listens there: stop it, or set LISTEN_ADDR or PORT to a free port): %w", written, err)
	}
	return fmt.Errorf("%s: cannot listen: %w", written, err)
}
