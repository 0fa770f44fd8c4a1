package spec_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
)

func seeds(f *testing.F, ext string) {
	for _, dir := range []string{"testdata/valid", "testdata/invalid", "examples"} {
		m, _ := filepath.Glob(filepath.Join(dir, "*"+ext))
		for _, p := range m {
			data, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
}

// fuzzOne checks that parsing never panics, that every error is a spec
// error, and that whatever parses survives validation, expansion, DOT output
// and a round trip through both formats unchanged.
func fuzzOne(t *testing.T, data []byte, format spec.Format) {
	file, err := spec.ParseFormat("fuzz", data, format)
	if err != nil {
		if !errors.Is(err, spec.ErrInvalid) {
			t.Fatalf("parse error is not ErrInvalid: %v", err)
		}
		return
	}
	res := &spec.Resources{Nodes: map[string]spec.NodeRes{"n1": {CPUs: 1}, "n2": {CPUs: 2, GPUs: 2}}}
	if err := file.Validate(spec.Options{Funcs: funcs.Default(), Resources: res}); err != nil && !errors.Is(err, spec.ErrInvalid) {
		t.Fatalf("validate error is not ErrInvalid: %v", err)
	}
	if b, vals, err := file.Bind(nil); err == nil && len(vals) > 0 {
		_ = b.Validate(spec.Options{Funcs: funcs.Default()})
	} else if err != nil && !errors.Is(err, spec.ErrParam) {
		t.Fatalf("bind error is not ErrParam: %v", err)
	}
	if g, err := file.Expand(); err == nil {
		g.LoopGroups()
		if err := g.Dump(io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	spec.StripPositions(file)
	for _, out := range []spec.Format{spec.FormatYAML, spec.FormatJSON} {
		text, err := spec.Marshal(file, out)
		if err != nil {
			t.Fatalf("marshal %v: %v", out, err)
		}
		if out == spec.FormatJSON {
			checkIndented(t, text)
			checkCanonical(t, file, text)
		}
		back, err := spec.ParseFormat("fuzz", text, out)
		if err != nil {
			t.Fatalf("reparse %v: %v\n%s", out, err, text)
		}
		spec.StripPositions(back)
		if !reflect.DeepEqual(back.Flows, file.Flows) {
			t.Fatalf("round trip through %v changed the file:\n%s\n%#v\n%#v", out, text, back.Flows, file.Flows)
		}
	}
}

func FuzzParseYAML(f *testing.F) {
	seeds(f, ".yaml")
	f.Fuzz(func(t *testing.T, data []byte) { defer watchdog(data)(); fuzzOne(t, data, spec.FormatYAML) })
}

func FuzzParseJSON(f *testing.F) {
	seeds(f, ".json")
	f.Add([]byte(`{"flows":[{"name":"a","tasks":[{"name":"x","func":"noop","args":{"k":[1,2.5,"s",null,{"z":true}]}}]}]}`))
	f.Add([]byte(`{"name":"p","params":{"n":{"type":"int","default":3},"f":{"type":"float","default":1e3},"s":{"type":"string"}},"tasks":[{"name":"x","func":"spin","args":{"us":"${n}","t":"a ${f} $${s}"}}]}`))
	// strings encoding/json escapes (or, for <>&, does not here) and empty collections in args
	f.Add([]byte(`{"name":"e \u00e9\u2028<>&","timeout":"1m","tasks":[{"name":"x\"y\\z\t","func":"noop","args":{"":{},"a":[],"b":[{}],"c":"\u0001\u007f\ud800"},"retries":2,"domain":"gpu","device":1,"node":"n1"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) { defer watchdog(data)(); fuzzOne(t, data, spec.FormatJSON) })
}

// checkCanonical fails unless the file's canonical JSON (spec.Canonical,
// what the flow registry's ids hash) is its indented JSON, indented,
// compacted: json.Compact's layout, whoever writes it.
func checkCanonical(t *testing.T, file *spec.File, indented []byte) {
	t.Helper()
	canon, err := spec.Canonical(file)
	if err != nil {
		t.Fatalf("canonical JSON: %v", err)
	}
	var want bytes.Buffer
	if err := json.Compact(&want, indented); err != nil {
		t.Fatalf("indented JSON is not JSON: %v\n%s", err, indented)
	}
	if !bytes.Equal(canon, want.Bytes()) {
		t.Fatalf("canonical JSON is not json.Compact's layout:\n%s\nwant\n%s", canon, want.Bytes())
	}
}

// checkIndented fails unless text, the indented JSON, is laid out as
// json.Indent lays it out with two spaces (and a final newline).
func checkIndented(t *testing.T, text []byte) {
	t.Helper()
	var compact, want bytes.Buffer
	if err := json.Compact(&compact, text); err != nil {
		t.Fatalf("canonical JSON is not JSON: %v\n%s", err, text)
	}
	if err := json.Indent(&want, compact.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	want.WriteByte('\n')
	if !bytes.Equal(text, want.Bytes()) {
		t.Fatalf("canonical JSON is not laid out as json.Indent lays it out:\n%s\nwant\n%s", text, want.Bytes())
	}
}
