package main

import (
	"github.com/phasegate/phasegate/settings"

	"strings"
	"testing"
)

// TestSeedNames checks the protocol's first names of the budgets are read
// as the budgets themselves, from the environment and the file, below the
// settings' own names in precedence; that both names with different values
// are refused; and that a refusal budget of 0, which would let no refused
// call through and used to be served as 3, is refused at start.
func TestSeedNames(t *testing.T) {
	tests := []struct {
		name       string
		env        map[string]string
		file       string
		cycles     int
		duplicates int
		wantErr    string
	}{
		{name: "cycles alias from the environment", env: map[string]string{"TWO_STAGE_MAX_CYCLES": "7"}, cycles: 7, duplicates: 3},
		{name: "duplicates alias from the environment", env: map[string]string{"TWO_STAGE_MAX_DUPLICATES": "2"}, cycles: 3, duplicates: 2},
		{name: "aliases in the file", file: "two_stage_max_cycles: 8\ntwo_stage_max_duplicates: 4\n", cycles: 8, duplicates: 4},
		{name: "environment alias over the file's own name", env: map[string]string{"TWO_STAGE_MAX_CYCLES": "9"}, file: "max_phase_cycles: 4\n", cycles: 9, duplicates: 3},
		{name: "the same value under both names", env: map[string]string{"TWO_STAGE_MAX_CYCLES": "5", "MAX_PHASE_CYCLES": "5"}, cycles: 5, duplicates: 3},
		{name: "different values under both names", env: map[string]string{"TWO_STAGE_MAX_CYCLES": "5", "MAX_PHASE_CYCLES": "6"},
			wantErr: "TWO_STAGE_MAX_CYCLES=5 and MAX_PHASE_CYCLES=6 name the same setting"},
		{name: "different values under both names in the file", file: "max_duplicate_attempts: 2\ntwo_stage_max_duplicates: 4\n",
			wantErr: ":2: two_stage_max_duplicates and max_duplicate_attempts name the same setting"},
		{name: "an alias checked like its setting", env: map[string]string{"TWO_STAGE_MAX_DUPLICATES": "0"},
			wantErr: "TWO_STAGE_MAX_DUPLICATES=0: must be a whole number of 1 or more"},
		{name: "no refusal budget", env: map[string]string{"MAX_DUPLICATE_ATTEMPTS": "0"},
			wantErr: "MAX_DUPLICATE_ATTEMPTS=0: must be a whole number of 1 or more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var args []string
			if tt.file != "" {
				args = []string{"--config", writeFile(t, tt.file)}
			}
			o, err := parseOptions(serveCommand, args, env(tt.env), &strings.Builder{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseOptions: got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseOptions: %v", err)
			}
			if o.MaxPhaseCycles != tt.cycles || o.MaxDuplicateAttempts != tt.duplicates {
				t.Errorf("budgets: got cycles %d, duplicates %d; want %d, %d", o.MaxPhaseCycles, o.MaxDuplicateAttempts, tt.cycles, tt.duplicates)
			}
		})
	}
}

// TestSeedNamesNotStray checks the older names are not warned about as
// misspelt settings.
func TestSeedNamesNotStray(t *testing.T) {
	got := settings.StrayVariables([]string{"TWO_STAGE_MAX_CYCLES=5", "TWO_STAGE_MAX_DUPLICATES=2", "TWO_STAGE_MAX_CYCLE=5"})
	if len(got) != 1 || got[0].Name != "TWO_STAGE_MAX_CYCLE" {
		t.Errorf("stray variables: got %+v, want only TWO_STAGE_MAX_CYCLE", got)
	}
}
