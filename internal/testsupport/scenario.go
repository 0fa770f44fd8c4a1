package testsupport

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// Scenarios runs the cases of one scenario file, in the style of
// cockroachdb/datadriven: a case is input lines, a line "----", and the
// output lines it must produce, ending at a blank line; blank lines and
// lines starting with # between cases are kept as they are. do gets the
// case's position ("file:line") and input lines and returns the output.
// A case whose output differs fails the test, showing both; with rewrite
// the file is written back with the outputs got instead (review the diff).
func Scenarios(t testing.TB, file string, rewrite bool, do func(at string, input []string) []string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out []string
	for i := 0; i < len(lines); {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out = append(out, line)
			i++
			continue
		}
		start := i
		at := fmt.Sprintf("%s:%d", file, i+1)
		var input []string
		for i < len(lines) && lines[i] != "----" {
			input = append(input, lines[i])
			i++
		}
		if i == len(lines) {
			t.Fatalf("%s: no ---- after the input", at)
		}
		i++ // ----
		var want []string
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			want = append(want, lines[i])
			i++
		}
		got := do(at, input)
		out = append(out, lines[start:start+len(input)]...)
		out = append(out, "----")
		out = append(out, got...)
		if !rewrite && !slices.Equal(got, want) {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", at, input[0], strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if rewrite {
		if err := os.WriteFile(file, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
