package spec_test

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
)

const paramFlow = `name: p
params:
  n: {type: int, default: 3}
  who: {type: string}
  rate: {type: float, default: 0.5}
  loud: {type: bool, default: false}
tasks:
  - name: init
    func: spin
    args: {us: "${n}"}
  - name: greet
    func: noop
    args:
      text: "hello ${who}, n=${n} rate ${rate} loud ${loud} $${HOME}"
      list: ["${loud}", "${rate}", {deep: "${who}"}]
    succeed: [init]
`

func TestBindSubstitutesTypedAndText(t *testing.T) {
	f, err := spec.Parse("p.yaml", []byte(paramFlow))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(spec.Options{Funcs: funcs.Default()}); err != nil {
		t.Fatalf("unbound file with parameters: %v", err)
	}
	b, vals, err := f.Bind(map[string]any{"who": "ann", "n": "42", "loud": true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"n": int64(42), "who": "ann", "rate": 0.5, "loud": true}
	if !reflect.DeepEqual(vals, want) {
		t.Errorf("values %#v, want %#v", vals, want)
	}
	if got := b.Root().Task("init").Args["us"]; got != int64(42) {
		t.Errorf(`"${n}" became %#v, want int64 42`, got)
	}
	g := b.Root().Task("greet").Args
	if got := g["text"]; got != "hello ann, n=42 rate 0.5 loud true ${HOME}" {
		t.Errorf("text %q", got)
	}
	if got := g["list"]; !reflect.DeepEqual(got, []any{true, 0.5, map[string]any{"deep": "ann"}}) {
		t.Errorf("list %#v", got)
	}
	if len(b.Params()) != 0 {
		t.Errorf("bound file still declares %v", b.Params())
	}
	if f.Root().Task("init").Args["us"] != "${n}" {
		t.Error("Bind changed the file it was given")
	}
	if err := b.Validate(spec.Options{}); err != nil {
		t.Fatal(err)
	}
	// The bound file goes to the nodes as canonical JSON: it parses back to itself.
	data, err := spec.Marshal(b, spec.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	back, err := spec.ParseJSON("p.json", data)
	if err != nil {
		t.Fatal(err)
	}
	spec.StripPositions(back)
	spec.StripPositions(b)
	if !reflect.DeepEqual(back.Flows, b.Flows) {
		t.Errorf("bound file changed through JSON:\n%s", data)
	}
}

func TestBindRefusesNamingTheParameter(t *testing.T) {
	f, err := spec.Parse("p.yaml", []byte(paramFlow))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"missing", nil, `p.yaml:4: flow "p" field "params": parameter "who" (string) has no default: give it a value (--param who=VALUE)`},
		{"ill-typed", map[string]any{"who": "x", "n": "three"}, `p.yaml:3: flow "p" field "params": parameter "n": must be an int, got "three"`},
		{"ill-typed go value", map[string]any{"who": "x", "loud": 1}, `parameter "loud": must be a bool, got 1`},
		{"whole float for int", map[string]any{"who": "x", "n": 2.5}, `parameter "n": must be an int, got 2.5`},
		{"undeclared", map[string]any{"who": "x", "m": "1"}, `parameter "m" given, but the flow does not declare it (declared: n, who, rate, loud)`},
		{"string for string only", map[string]any{"who": 7}, `parameter "who": must be a string, got 7`},
		{"json number for string", map[string]any{"who": json.Number("7")}, `parameter "who": must be a string, got 7`},
		{"json number for int", map[string]any{"who": "x", "n": json.Number("2.5")}, `parameter "n": must be an int, got 2.5`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := f.Bind(c.vals)
			if err == nil {
				t.Fatal("bound, want an error")
			}
			if !errors.Is(err, spec.ErrParam) || !errors.Is(err, spec.ErrInvalid) {
				t.Errorf("%v: not ErrParam and ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error\n%v\nwant it to contain\n%s", err, c.want)
			}
		})
	}
}

// Values that went through JSON decoded with UseNumber (a run's, through
// raft) bind exactly: an int past float64's 2^53 keeps its value, in the
// typed argument and in the text.
func TestBindJSONNumberExact(t *testing.T) {
	f, err := spec.Parse("p.yaml", []byte(paramFlow))
	if err != nil {
		t.Fatal(err)
	}
	b, vals, err := f.Bind(map[string]any{"who": "ann", "n": json.Number("9007199254740993"), "rate": json.Number("0.25")})
	if err != nil {
		t.Fatal(err)
	}
	if vals["n"] != int64(9007199254740993) || vals["rate"] != 0.25 {
		t.Errorf("values %#v, want n int64 9007199254740993 and rate 0.25", vals)
	}
	if got := b.Root().Task("init").Args["us"]; got != int64(9007199254740993) {
		t.Errorf(`"${n}" became %#v, want int64 9007199254740993`, got)
	}
	if got := b.Root().Task("greet").Args["text"]; got != "hello ann, n=9007199254740993 rate 0.25 loud false ${HOME}" {
		t.Errorf("text %q", got)
	}
}

func TestBindWithoutParams(t *testing.T) {
	f, err := spec.Parse("x.yaml", []byte("name: x\ntasks:\n  - {name: a, func: noop, args: {s: \"${HOME}\"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, vals, err := f.Bind(nil)
	if err != nil || b != f || vals != nil {
		t.Fatalf("Bind(nil) = %p, %v, %v; want the file itself", b, vals, err)
	}
	if err := f.Validate(spec.Options{}); err != nil {
		t.Errorf("${ is plain text without params: %v", err)
	}
	if _, _, err := f.Bind(map[string]any{"k": "v"}); err == nil || !strings.Contains(err.Error(), `parameter "k" given, but the flow declares no parameters`) {
		t.Errorf("value for a flow without params: %v", err)
	}
}

// A bound argument is checked by its function: "${n}" passes before
// binding, the value it takes may not.
func TestBoundArgsAreChecked(t *testing.T) {
	f, err := spec.Parse("p.yaml", []byte(paramFlow))
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := f.Bind(map[string]any{"who": "x", "n": "-5"})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Validate(spec.Options{Funcs: funcs.Default()})
	if err == nil || !strings.Contains(err.Error(), `task "init" field "args"`) {
		t.Fatalf("spin with us=-5: %v", err)
	}
}

func TestParamValue(t *testing.T) {
	for _, c := range []struct {
		t    spec.ParamType
		in   any
		want any
	}{
		{spec.ParamInt, "7", int64(7)}, {spec.ParamInt, 7, int64(7)}, {spec.ParamInt, 7.0, int64(7)},
		{spec.ParamFloat, "1e3", 1000.0}, {spec.ParamFloat, 3, 3.0},
		{spec.ParamBool, "true", true}, {spec.ParamBool, false, false},
		{spec.ParamString, "7", "7"}, {spec.ParamString, "", ""},
		// What a decoder with UseNumber gives: exact, past float64's 2^53.
		{spec.ParamInt, json.Number("9007199254740993"), int64(9007199254740993)},
		{spec.ParamInt, json.Number("-9223372036854775808"), int64(math.MinInt64)},
		{spec.ParamInt, json.Number("3.0"), int64(3)}, {spec.ParamInt, json.Number("1e3"), int64(1000)},
		{spec.ParamFloat, json.Number("0.1"), 0.1}, {spec.ParamFloat, json.Number("7"), 7.0},
	} {
		got, err := spec.ParamValue(c.t, c.in)
		if err != nil || got != c.want {
			t.Errorf("ParamValue(%s, %#v) = %#v, %v; want %#v", c.t, c.in, got, err, c.want)
		}
	}
	for _, c := range []struct {
		t  spec.ParamType
		in any
	}{{spec.ParamInt, "1.5"}, {spec.ParamFloat, "inf"}, {spec.ParamBool, "yes please"}, {spec.ParamString, true}, {"date", "x"},
		{spec.ParamInt, json.Number("1.5")}, {spec.ParamInt, json.Number("9223372036854775808")},
		{spec.ParamFloat, json.Number("1e400")}, {spec.ParamString, json.Number("7")},
		{spec.ParamBool, json.Number("1")}, {"date", json.Number("1")}} {
		if got, err := spec.ParamValue(c.t, c.in); err == nil {
			t.Errorf("ParamValue(%s, %#v) = %#v, want an error", c.t, c.in, got)
		}
	}
}
