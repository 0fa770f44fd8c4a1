package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/internal/flowgen"
)

// FuzzScanJSON checks the fast JSON path against json.Decoder's: whatever
// scanJSON accepts, the Decoder path accepts with the same tree (values,
// types, lines, key order); what the Decoder refuses, scanJSON refuses.
func FuzzScanJSON(f *testing.F) {
	for _, dir := range []string{"testdata/valid", "testdata/invalid", "examples"} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, p := range m {
			data, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	for _, s := range []string{
		string(canonicalFanIn(f, 20)),
		`{"a": [1, -2, 3.5, 1e3, -0.5E-2, 18446744073709551615, 1e400], "b": {}, "c": []}`,
		"{\n\"k\":\n\"v\\n\\u00e9\\ud83d\\ude00\",\n\"k\": \"dup\"\n}",
		`{"x": "caf\u00e9", "y": "\xff", "t": true, "f": false, "n": null}`,
		`[01]`, `[1.]`, `[-]`, `[1e]`, `{"a" 1}`, `{"a":1,}`, `[1,]`, `{} {}`, `"\u12"`, "\"\t\"", `[tru]`, `nul`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, err := decodeJSONTree(data)
		got, ok := scanJSON(data)
		if !ok {
			return // the Decoder path decides, and words any error
		}
		if err != nil {
			t.Fatalf("scanJSON accepted what the Decoder refuses (%v):\n%q", err, data)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trees differ for %q:\nscan    %s\ndecoder %s", data, dumpNode(got), dumpNode(want))
		}
	})
}

// TestScanJSONTakesCanonical: a flow's canonical JSON, what every node
// parses, takes the fast path.
func TestScanJSONTakesCanonical(t *testing.T) {
	data := canonicalFanIn(t, 50)
	if _, ok := scanJSON(data); !ok {
		t.Fatalf("canonical JSON fell back to the Decoder path:\n%s", data)
	}
}

// canonicalFanIn is the canonical JSON of flowgen.FanInOut(width).
func canonicalFanIn(tb testing.TB, width int) []byte {
	f, err := Parse("wide.yaml", flowgen.FanInOut(width))
	if err != nil {
		tb.Fatal(err)
	}
	data, err := Marshal(f, FormatJSON)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func dumpNode(n *node) string {
	if n == nil {
		return "<nil>"
	}
	var b strings.Builder
	switch n.kind {
	case nMap:
		b.WriteString("{")
		for i := range n.keys {
			fmt.Fprintf(&b, "%s:%s,", dumpNode(n.keys[i]), dumpNode(n.vals[i]))
		}
		b.WriteString("}")
	case nSeq:
		b.WriteString("[")
		for _, it := range n.items {
			fmt.Fprintf(&b, "%s,", dumpNode(it))
		}
		b.WriteString("]")
	case nNull:
		b.WriteString("null")
	default:
		fmt.Fprintf(&b, "%T(%v)", n.val, n.val)
	}
	fmt.Fprintf(&b, "@%d", n.line)
	return b.String()
}
