package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/phasegate/phasegate/settings"
)

// options is the resolved configuration of one run.
type options = settings.Settings

// rawValue is a flag's value as given, checked later with the others so
// that every error has the same form. It implements flag.Value.
type rawValue struct {
	s   *settings.Setting
	raw string
}

func (v *rawValue) String() string {
	if v == nil {
		return ""
	}
	return v.raw
}
func (v *rawValue) Set(s string) error { v.raw = s; return nil }

// IsBoolFlag makes a boolean setting a flag without a value, after the
// flag package's convention: --show-notices, --show-notices=false.
func (v *rawValue) IsBoolFlag() bool { return v.s.IsBool() }

// command is what parseOptions parses the arguments of: the gateway, or
// the demo, each with its own help.
type command struct {
	name  string // as the user types it: "phasegate", "phasegate demo"
	intro string // the first paragraphs of --help
	// reads are the settings the command reads, each a flag and a
	// variable; nil is every setting and the config file. A command that
	// lists its settings takes no config file.
	reads []*settings.Setting
}

// settings are the settings cmd reads.
func (cmd command) settings() []*settings.Setting {
	if cmd.reads == nil {
		return settings.All()
	}
	return cmd.reads
}

var serveCommand = command{name: "phasegate", intro: `phasegate: an OpenAI-compatible gateway that guards agent tool loops.

Usage:
  phasegate [flags]          serve (with no provider configured: the built-in simulated model)
  phasegate demo [flags]     show the guard at work on simulated models
  phasegate healthcheck      exit 0 if the gateway at LISTEN_ADDR is ready (a container's
                             health check; phasegate healthcheck --help says more)
  phasegate help             this help
  phasegate version          version, commit and Go version (also --version)

Every setting is a flag, an environment variable and a key of the YAML file
given with --config; a flag wins over the environment, which wins over the
file, which wins over the default.
`}

// parseOptions resolves every setting: flag over environment over file
// over default. It returns flag.ErrHelp after printing the help or the
// version to stdout: the request was answered, the process ends with 0.
func parseOptions(cmd command, args []string, getenv func(string) string, stdout io.Writer) (options, error) {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	// The flag package would print its errors and the whole help to the
	// output; errors are returned instead, once, and help goes to stdout.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	configPath := new(string)
	if cmd.reads == nil {
		fs.StringVar(configPath, "config", "", "YAML config file (environment CONFIG)")
	}
	version := fs.Bool("version", false, "print the version, commit and Go version, and exit")
	flags := map[string]*rawValue{}
	for _, s := range cmd.settings() {
		flags[s.Flag()] = &rawValue{s: s}
		fs.Var(flags[s.Flag()], s.Flag(), s.Help())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout, cmd)
			return options{}, err
		}
		return options{}, flagError(cmd, err)
	}
	if *version {
		fmt.Fprintln(stdout, versionLine())
		return options{}, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q (flags take --name=value; %s --help lists them)", fs.Arg(0), cmd.name)
	}
	in := settings.Input{Flags: map[*settings.Setting]string{}, Getenv: getenv}
	if cmd.reads == nil {
		in.ConfigPath = getenv("CONFIG")
	}
	fs.Visit(func(f *flag.Flag) {
		if v, ok := flags[f.Name]; ok {
			in.Flags[v.s] = v.raw
		} else if f.Name == "config" {
			in.ConfigPath = *configPath
		}
	})
	return settings.Load(in)
}

// flagError rewords the flag package's errors with the flag as typed
// (--name) and a pointer to the help.
func flagError(cmd command, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		known := []string{"version", "help"}
		if cmd.reads == nil {
			known = append(known, "config")
		}
		for _, s := range cmd.settings() {
			known = append(known, s.Flag())
		}
		return fmt.Errorf("unknown flag --%s%s (%s --help lists every flag)", name, settings.DidYouMean(name, known, "--"), cmd.name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Errorf("--%s needs a value: --%s=VALUE (%s --help says which)", name, name, cmd.name)
	}
	return fmt.Errorf("%s (%s --help lists every flag)", msg, cmd.name)
}

// printHelp writes the help: the command's introduction, then every flag
// it reads with its type, default, environment variable and file key, in
// the layout of flag.PrintDefaults with the flags spelt --name.
func printHelp(w io.Writer, cmd command) {
	fmt.Fprintf(w, "%s\nFlags:\n", cmd.intro)
	if cmd.reads == nil {
		helpLine(w, "config", "string", "YAML config file", "", "environment CONFIG")
	}
	helpLine(w, "version", "", "print the version, commit and Go version, and exit", "", "")
	for _, s := range cmd.settings() {
		also := "environment " + s.Env()
		if cmd.reads == nil {
			also += ", file key " + s.Key()
		}
		helpLine(w, s.Flag(), s.TypeName(), s.Help(), s.HelpDefault(), also)
	}
	fmt.Fprintf(w, "\nDurations take a unit (30s, 2m, 1h); a boolean flag alone means true (--%s=false to turn one off).\n", "show-notices")
}

// versionLine returns the version, commit and Go version the binary was
// built with, from its build information.
func versionLine() string {
	version, commit, modified, goVersion := "(devel)", "unknown", false, runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if modified {
		commit += " (modified)"
	}
	if stampVersion != "" {
		version = stampVersion
	}
	if stampCommit != "" {
		commit = stampCommit
	}
	return fmt.Sprintf("phasegate %s, commit %s, built with %s", version, commit, goVersion)
}

// helpLine writes one flag of a help: --name, its type, what it does, its
// default and where else it may be set, as every command's help writes
// them.
func helpLine(w io.Writer, name, typ, help, def, also string) {
	fmt.Fprintf(w, "  --%s", name)
	if typ != "" {
		fmt.Fprintf(w, " %s", typ)
	}
	fmt.Fprintf(w, "\n    \t%s", help)
	if def != "" {
		fmt.Fprintf(w, " (default %s)", def)
	}
	if also != "" {
		fmt.Fprintf(w, "\n    \t%s", also)
	}
	fmt.Fprintln(w)
}
