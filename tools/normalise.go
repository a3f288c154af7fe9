package tools

import (
	"strings"
	"unicode/utf8"
)

// NormaliseResult returns a tool result as an agent reads it when it
// compares two runs of the same command: without what changes from run to
// run and tells nothing new. What is left differs when the result differs
// in substance: a test that now passes, a file with other contents, a
// count that moved.
//
// It works in one pass over the lines of s. On each line it applies what
// a terminal shows (the text after the last carriage return; no ANSI
// escapes), then the line rules (the stamps an agent puts on a shell
// result, such as Codex's "Chunk ID" and "Wall time" lines and Qwen Code's
// echo of the command), drops trailing white space, and then the word
// rules (timestamps, dates, durations, ids, temporary names, process ids,
// transfer rates) on each word. Every rule has a test built from a real
// tool's output in normalise_test.go.
func NormaliseResult(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	first := true
	for line := range strings.Lines(s) {
		line = shown(line)
		keep := true
		for _, r := range lineRules {
			if line, keep = r.apply(line, first); !keep {
				break
			}
		}
		first = false
		if !keep {
			continue
		}
		writeWords(&b, strings.TrimRight(line, " \t"))
		b.WriteByte('\n')
	}
	return strings.TrimSpace(b.String())
}

// shown is a line as a terminal shows it: its line ending dropped, the
// text before its last carriage return drawn over (progress bars and
// spinners redraw their line), its ANSI escapes gone.
func shown(line string) string {
	line = strings.TrimSuffix(line, "\n")
	line = strings.TrimSuffix(line, "\r")
	if i := strings.LastIndexByte(line, '\r'); i >= 0 {
		line = line[i+1:]
	}
	if strings.IndexByte(line, 0x1b) >= 0 {
		line = stripANSI(line)
	}
	return line
}

// stripANSI removes the escape sequences of ECMA-48 a terminal acts on:
// CSI (colours, cursor moves), OSC (titles, links, ended by BEL or ST)
// and two-byte escapes.
func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != 0x1b || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch j := i + 2; s[i+1] {
		case '[':
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
		case ']':
			for j < len(s) && s[j] != 0x07 && !(s[j] == 0x1b && j+1 < len(s) && s[j+1] == '\\') {
				j++
			}
			if j < len(s) && s[j] == 0x1b {
				j++
			}
			i = j
		default:
			i++
		}
	}
	return b.String()
}

// lineRule rewrites or drops a whole line. apply returns the line to
// keep and whether to keep it; first is whether it is the result's first
// line.
type lineRule struct {
	name  string
	apply func(line string, first bool) (string, bool)
}

// lineRules are the stamps an agent or a tool puts on a line of its own.
var lineRules = []lineRule{
	// Codex's exec_command opens its result with "Chunk ID: 3fa1c2",
	// "Wall time: 0.0113 seconds", maybe "Process running with session ID
	// 7" and "Original token count: 412", then "Output:" (codex-rs
	// unified_exec).
	{"Codex chunk id", dropPrefix("Chunk ID: ")},
	{"Codex wall time", func(l string, _ bool) (string, bool) {
		return l, !(strings.HasPrefix(l, "Wall time: ") && strings.HasSuffix(l, " seconds"))
	}},
	{"Codex session id", numberAfter("Process running with session ID ")},
	{"Codex token count", dropPrefix("Original token count: ")},
	// Qwen Code's run_shell_command opens with "Command: <the command as
	// given>", so `echo done` and `echo "done"` would never agree; a
	// shell transcript opens with "$ <command>".
	{"echoed command", func(l string, first bool) (string, bool) {
		return l, !first || !strings.HasPrefix(l, "Command: ") && !strings.HasPrefix(l, "$ ")
	}},
	{"background pids", numberAfter("Background PIDs: ")},
	{"shell job", shellJob},
	{"go test cache", func(l string, _ bool) (string, bool) {
		return strings.ReplaceAll(l, "(cached)", "<duration>"), true
	}},
	{"progress bar", progressBar},
}

func dropPrefix(prefix string) func(string, bool) (string, bool) {
	return func(l string, _ bool) (string, bool) { return l, !strings.HasPrefix(l, prefix) }
}

// numberAfter replaces the numbers of a line that starts with prefix and
// holds only numbers (and commas and spaces) after it.
func numberAfter(prefix string) func(string, bool) (string, bool) {
	return func(l string, _ bool) (string, bool) {
		rest, ok := strings.CutPrefix(l, prefix)
		if ok && rest != "" && strings.Trim(rest, "0123456789, ") == "" {
			return prefix + "<n>", true
		}
		return l, true
	}
}

// shellJob replaces the process id of a job a shell started in the
// background: "[1] 48211", "[2]+ 5120".
func shellJob(l string, _ bool) (string, bool) {
	rest, ok := strings.CutPrefix(l, "[")
	if !ok {
		return l, true
	}
	job, pid, ok := strings.Cut(rest, "]")
	pid = strings.TrimLeft(strings.TrimLeft(pid, "+-"), " ")
	if !ok || !digits(job) || !digits(pid) {
		return l, true
	}
	return "[" + job + "] <n>", true
}

// progressBar replaces a drawn bar and its percentage, "[=====>    ] 55%".
func progressBar(l string, _ bool) (string, bool) {
	open := strings.IndexByte(l, '[')
	if open < 0 || strings.IndexByte(l, '%') < 0 {
		return l, true
	}
	end := open + 1
	for end < len(l) && strings.IndexByte("=#>.- ", l[end]) >= 0 {
		end++
	}
	if end >= len(l) || l[end] != ']' || end == open+1 {
		return l, true
	}
	pct := strings.TrimLeft(l[end+1:], " ")
	n := 0
	for n < len(pct) && (pct[n] >= '0' && pct[n] <= '9' || pct[n] == '.') {
		n++
	}
	if n == 0 || n >= len(pct) || pct[n] != '%' {
		return l, true
	}
	return l[:open] + "<progress>" + pct[n+1:], true
}

// wordRule recognises a stamp that starts at word i of a line's words:
// match returns how many words it spans (0: none), and the stamp takes
// their place, with the separators between them.
type wordRule struct {
	name  string
	stamp string
	match func(ws []string, i int) int
}

// wordRules are the stamps any program prints, tried in order on each
// word.
var wordRules = []wordRule{
	{"process id", "<n>", processID},
	{"ISO timestamp", "<time>", one(isISOTimestamp)},
	{"ISO date", "<date>", one(isISODate)},
	{"weekday date", "<date>", weekdayDate},
	{"clock time", "<time>", one(isClock)},
	{"unix time", "<time>", one(isUnixTime)},
	{"duration", "<duration>", duration},
	{"transfer rate", "<rate>", withUnit(isRateUnit)},
	{"temporary folder", "<tmp>", one(isTempFolder)},
	{"temporary name", "<tmp>", one(hasTempName)},
	{"UUID", "<id>", one(isUUID)},
	{"address", "<addr>", one(isAddress)},
	{"hex id", "<id>", one(isHexID)},
}

// one is a rule of one word.
func one(f func(string) bool) func([]string, int) int {
	return func(ws []string, i int) int {
		if f(ws[i]) {
			return 1
		}
		return 0
	}
}

// isWordByte reports whether c belongs to a word: letters, digits, the
// marks numbers, times, paths and ids are written with, and every byte
// of a multi-byte character (µs).
func isWordByte(c byte) bool {
	return c >= 0x80 || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("._:/+-%~", c) >= 0
}

// writeWords writes line with its stamps replaced, word by word.
func writeWords(b *strings.Builder, line string) {
	words, seps := splitWords(line)
	for k := 0; k < len(words); {
		b.WriteString(seps[k])
		n := 0
		var stamp string
		for _, r := range wordRules {
			if n = r.match(words, k); n > 0 {
				stamp = r.stamp
				break
			}
		}
		if n == 0 {
			b.WriteString(words[k])
			k++
			continue
		}
		b.WriteString(stamp)
		k += n
	}
	b.WriteString(seps[len(seps)-1])
}

// splitWords splits line into its words and what separates them:
// seps[k] precedes words[k], and the last sep ends the line. A word loses
// the marks that end a sentence or a field (. , : ;) to the separator
// after it, so "0.014s." is the duration 0.014s.
func splitWords(line string) (words, seps []string) {
	start, i := 0, 0
	for {
		for i < len(line) && !isWordByte(line[i]) {
			i++
		}
		if i == len(line) {
			break
		}
		j := i
		for j < len(line) && isWordByte(line[j]) {
			j++
		}
		w := strings.TrimRight(line[i:j], ".,:;")
		if w != "" {
			seps = append(seps, line[start:i])
			words = append(words, w)
			start = i + len(w)
		}
		i = j
	}
	return words, append(seps, line[start:])
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// shape reports whether s has the shape pattern, where 9 stands for a
// digit and any other byte for itself.
func shape(s, pattern string) bool {
	if len(s) != len(pattern) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if pattern[i] == '9' {
			if s[i] < '0' || s[i] > '9' {
				return false
			}
		} else if s[i] != pattern[i] {
			return false
		}
	}
	return true
}

// isNumber reports whether s is a decimal number, 12 or 0.014.
func isNumber(s string) bool {
	whole, frac, ok := strings.Cut(s, ".")
	return digits(whole) && (!ok || digits(frac))
}

func isISODate(s string) bool { return shape(s, "9999-99-99") }

// isISOTimestamp: 2026-11-27T14:49:28.120Z, 2026-11-27T14:49+02:00.
func isISOTimestamp(s string) bool {
	return len(s) > 11 && isISODate(s[:10]) && (s[10] == 'T' || s[10] == '_') && clock(strings.TrimRight(timeZone(s[11:]), "Z"), 2)
}

// timeZone is a time of day without its offset from UTC.
func timeZone(s string) string {
	if i := strings.LastIndexAny(s, "+-"); i > 0 {
		return s[:i]
	}
	return s
}

// isClock: a time of day with its seconds, 14:49:28, 4:49:28.120,
// 14:49:28,120 (a bare 12:30 is as likely a position or a score).
func isClock(s string) bool { return clock(s, 3) }

// clock reports whether s is a time of day of at least parts parts of
// hours, minutes and seconds, with a fraction of a second or not.
func clock(s string, parts int) bool {
	s, _, _ = strings.Cut(strings.Replace(s, ",", ".", 1), ".")
	ps := strings.Split(s, ":")
	if len(ps) < parts || len(ps) > 3 || len(ps[0]) > 2 {
		return false
	}
	for i, p := range ps {
		if !digits(p) || i > 0 && len(p) != 2 {
			return false
		}
	}
	return true
}

// isUnixTime: seconds or milliseconds since 1970 from 2017 to 2033.
func isUnixTime(s string) bool {
	whole, _, _ := strings.Cut(s, ".")
	return (len(whole) == 10 || len(whole) == 13) && digits(whole) && whole[0] == '1' && whole[1] >= '5' && isNumber(s)
}

var (
	weekdays = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}
	months   = []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
)

func isName(s string, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(s, n) {
			return true
		}
	}
	return false
}

// weekdayDate: "Thu Nov 27" (date(1)), "Thu, 27 Nov" (HTTP, mail).
func weekdayDate(ws []string, i int) int {
	if i+2 >= len(ws) || !isName(ws[i], weekdays) {
		return 0
	}
	if isName(ws[i+1], months) && len(ws[i+2]) <= 2 && digits(ws[i+2]) ||
		len(ws[i+1]) <= 2 && digits(ws[i+1]) && isName(ws[i+2], months) {
		return 3
	}
	return 0
}

// durationUnits are the units a duration is written in, after a number
// and a space or none.
var durationUnits = []string{"ns", "µs", "us", "ms", "s", "sec", "secs", "second", "seconds",
	"millisecond", "milliseconds", "min", "mins", "minute", "minutes"}

// duration: 0.014s, 812ms, "3 ms", "took 3 seconds", 0m1.204s (time(1)).
func duration(ws []string, i int) int {
	w := ws[i]
	if n := withUnit(func(u string) bool { return isName(u, durationUnits) })(ws, i); n > 0 {
		return n
	}
	m, s, ok := strings.Cut(w, "m")
	if ok && digits(m) && strings.HasSuffix(s, "s") && isNumber(strings.TrimSuffix(s, "s")) {
		return 1
	}
	return 0
}

// withUnit matches a number followed by a unit unit accepts, in one word
// (12ms) or two ("12 ms").
func withUnit(unit func(string) bool) func([]string, int) int {
	return func(ws []string, i int) int {
		w := ws[i]
		n := 0
		for n < len(w) && (w[n] >= '0' && w[n] <= '9' || w[n] == '.') {
			n++
		}
		switch {
		case n == 0 || !isNumber(w[:n]):
			return 0
		case n < len(w):
			if unit(w[n:]) {
				return 1
			}
		case i+1 < len(ws) && unit(ws[i+1]):
			return 2
		}
		return 0
	}
}

// isRateUnit: MB/s, kB/s, MiB/s, Gb/s, B/s.
func isRateUnit(u string) bool {
	b, ok := strings.CutSuffix(u, "/s")
	if !ok {
		return false
	}
	b = strings.TrimRight(b, "Bb")
	b = strings.TrimSuffix(b, "i")
	return len(b) <= 1 && (b == "" || strings.ContainsAny(b, "kKMGT"))
}

// processID: the number of "pid 48211", "PID: 48211", "pgid=48211",
// "Process Group PGID: 48211", "process id 48211".
func processID(ws []string, i int) int {
	if i == 0 || !digits(ws[i]) {
		return 0
	}
	switch prev := strings.ToLower(ws[i-1]); {
	case prev == "pid", prev == "pgid", prev == "id" && i >= 2 && strings.EqualFold(ws[i-2], "process"):
		return 1
	}
	return 0
}

// isTempFolder: macOS's per-user temporary folder, /var/folders/qz/…/T/….
func isTempFolder(s string) bool {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(s, "/private"), "/var/folders/")
	return ok && strings.Contains(rest, "/T/")
}

// hasTempName reports whether a path holds a generated temporary name:
// Python's tempfile (tmpk3j2_9xq), mktemp (tmp.Ab12Cd34Ef), go build's
// and go test's directories (go-build1234, TestDial1234567890), pytest's
// (pytest-12).
func hasTempName(s string) bool {
	for seg := range strings.SplitSeq(s, "/") {
		switch {
		case len(seg) == 11 && strings.HasPrefix(seg, "tmp") && strings.Trim(seg[3:], "abcdefghijklmnopqrstuvwxyz0123456789_") == "",
			len(seg) == 14 && strings.HasPrefix(seg, "tmp.") && alnum(seg[4:]),
			strings.HasPrefix(seg, "go-build") && digits(seg[8:]),
			strings.HasPrefix(seg, "pytest-") && digits(seg[7:]),
			strings.HasPrefix(seg, "Test") && trailingDigits(seg) >= 6:
			return true
		}
	}
	return false
}

func alnum(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return s != ""
}

func trailingDigits(s string) int {
	n := 0
	for n < len(s) && s[len(s)-1-n] >= '0' && s[len(s)-1-n] <= '9' {
		n++
	}
	return n
}

func isHex(s string, upper bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || !upper && c >= 'a' && c <= 'f' || upper && c >= 'A' && c <= 'F') {
			return false
		}
	}
	return s != ""
}

// isUUID: 7c9e6679-7425-40de-944b-e07fc1f5b5c9, either case.
func isUUID(s string) bool {
	parts := strings.Split(s, "-")
	if len(parts) != 5 {
		return false
	}
	for i, n := range []int{8, 4, 4, 4, 12} {
		if len(parts[i]) != n || !isHex(strings.ToLower(parts[i]), false) {
			return false
		}
	}
	return true
}

// isAddress: a memory address in a repr or a trace, 0x7f3b2c1d0e50.
func isAddress(s string) bool {
	h, ok := strings.CutPrefix(s, "0x")
	return ok && len(h) >= 6 && isHex(strings.ToLower(h), false)
}

// isHexID: 16 hex digits or more, one case (a request id, a full commit
// hash, a digest). A short hash, 12 digits or fewer as git abbreviates
// them, stays: it is as likely to name what changed.
func isHexID(s string) bool {
	return len(s) >= 16 && utf8.ValidString(s) && (isHex(s, false) || isHex(s, true))
}
