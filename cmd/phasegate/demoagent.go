package main

import (
	"encoding/json"
	"fmt"
	"strings"

	openai "github.com/sashabaranov/go-openai"
	"github.com/sashabaranov/go-openai/jsonschema"

	"github.com/phasegate/phasegate/sim"
)

// demoTool declares a function tool whose parameters are the string
// properties props, all required.
func demoTool(name, description string, props ...string) openai.Tool {
	p := make(map[string]jsonschema.Definition, len(props))
	for _, n := range props {
		p[n] = jsonschema.Definition{Type: jsonschema.String}
	}
	return openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: name, Description: description,
		Parameters: jsonschema.Definition{Type: jsonschema.Object, Properties: p, Required: props}}}
}

// demoSessionTools are the tools of sim.SessionScript.
var demoSessionTools = []openai.Tool{
	demoTool("list_files", "List a directory", "path"),
	demoTool("search", "Search files for a pattern", "pattern", "path"),
	demoTool("read_file", "Read a file", "path"),
	demoTool("edit_file", "Edit a file", "path", "change"),
	demoTool("run_tests", "Run the tests of a package", "package"),
	demoTool("git", "Run a git command", "args"),
}

// demoCodeTools is the code interpreter of the verification loop.
var demoCodeTools = []openai.Tool{demoTool("execute_code", "Run Python code and return its output", "code")}

// demoSession runs the session's tools on a small repository whose
// tests fail three times, then pass: each edit of calc/round.go fixes
// one, and reading the file shows its new version.
func demoSession() func(name, args string) string {
	edits := 0
	return func(name, args string) string {
		var a map[string]string
		_ = json.Unmarshal([]byte(args), &a)
		switch name {
		case "list_files":
			return "CHANGELOG.md calc/ cmd/ go.mod"
		case "search":
			if a["pattern"] == "Round" && a["path"] == "calc" {
				return "calc/round.go:12: func Round(x float64) float64"
			}
			return "no matches"
		case "read_file":
			if a["path"] == "calc/round.go" {
				return fmt.Sprintf("calc/round.go, version %d: func Round(x float64) float64 {…}", edits+1)
			}
			return a["path"] + ": …"
		case "edit_file":
			if a["path"] == "calc/round.go" {
				edits++
			}
			return `{"ok":true}`
		case "run_tests":
			if failed := 3 - edits; failed > 0 && a["package"] == "./calc" {
				return fmt.Sprintf("FAIL calc: %d of 3 tests fail", failed)
			}
			return "ok " + a["package"]
		case "git":
			return "git " + strings.Fields(a["args"] + " ?")[0] + ": ok"
		}
		return `{"error":"unknown tool"}`
	}
}

// demoCode runs the verification loop's code: the work prints the total,
// every verification prints "done".
func demoCode() func(name, args string) string {
	return func(_, args string) string {
		var a map[string]string
		_ = json.Unmarshal([]byte(args), &a)
		if a["code"] == sim.VerifyWork {
			return "4817.25\n"
		}
		return "done\n"
	}
}
