package spec_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
)

func TestBuilderMatchesFile(t *testing.T) {
	b := spec.NewFlow("dowhile")
	init := b.Task("init").Func("noop")
	body := b.Task("body").Func("spin").Arg("us", 10).Succeed(init)
	cond := b.Condition("cond").Func("loop").Arg("n", uint8(99)).Succeed(body)
	done := b.Task("done").Func("hash")
	cond.Precede(body, done)
	built, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.ReadFile("examples/listing5-dowhile.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec.StripPositions(f)
	if !reflect.DeepEqual(*built, f.Flows[0]) {
		t.Errorf("built %#v\nfile  %#v", *built, f.Flows[0])
	}
}

func TestBuilderEveryField(t *testing.T) {
	other := spec.NewFlow("other")
	other.Task("a").Func("hash")
	lib := other.MustBuild()

	b := spec.NewFlow("main").Timeout(10 * time.Minute)
	start := b.Task("start").Func("noop")
	gpu := b.Task("gpu").Func("saxpy").Args(map[string]any{"n": 4096, "a": float32(1.5)}).GPU(1).Node("n2").Retries(2).Timeout(30 * time.Second).Succeed(start)
	fan := b.Subflow("fan").Func("fanout").Arg("n", 2).Succeed(start)
	mod := b.Module("mod", "other").Succeed(fan)
	pick := b.MultiCondition("pick").Func("pick").Arg("choices", []int{0, 1}).Succeed(gpu, mod)
	l, r := b.Task("l").Func("hash").Domain(spec.DomainCPU), b.Task("r").Func("hash")
	pick.Precede(l, r)
	fl, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	file, err := spec.NewFile(spec.Options{Funcs: funcs.Default(), Resources: &spec.Resources{Nodes: map[string]spec.NodeRes{"n2": {CPUs: 2, GPUs: 2}}}}, fl, lib)
	if err != nil {
		t.Fatal(err)
	}
	g := file.Flows[0].Task("gpu")
	if g.Domain != spec.DomainGPU || *g.Device != 1 || g.Node != "n2" || g.Retries != 2 || g.Timeout != 30*time.Second {
		t.Errorf("gpu task %+v", g)
	}
	if d := file.Flows[0].Task("l").Domain; d != spec.DomainCPU {
		t.Errorf("task l: domain %q, want cpu", d)
	}
	if g.Args["n"] != int64(4096) || g.Args["a"] != 1.5 {
		t.Errorf("args not normalised: %#v", g.Args)
	}
	if got := file.Flows[0].Task("pick").Args["choices"]; !reflect.DeepEqual(got, []any{int64(0), int64(1)}) {
		t.Errorf("list arg %#v", got)
	}
	roundTrip(t, file)
}

func TestBuilderErrors(t *testing.T) {
	b := spec.NewFlow("bad")
	a := b.Task("a").Func("noop").Arg("ch", make(chan int))
	b.Task("a").Func("noop").Succeed(a)
	b.Module("m", "elsewhere") // not checked by Build: the flow is alone
	_, err := b.Build()
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{
		`flow "bad" task "a" field "args": argument "ch": unsupported type chan int`,
		`flow "bad" task "a" field "name": duplicate task name`,
	}
	got := strings.Split(err.Error(), "\n")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if !errors.Is(err, spec.ErrDuplicate) || !errors.Is(err, spec.ErrBadValue) {
		t.Error("kinds missing")
	}
	// In a file, the unknown flow shows.
	fl := spec.NewFlow("main")
	fl.Module("m", "elsewhere")
	_, err = spec.NewFile(spec.Options{}, fl.MustBuild())
	if !errors.Is(err, spec.ErrUnknownFlow) {
		t.Errorf("got %v", err)
	}
}

func TestErrorFormat(t *testing.T) {
	cases := []struct {
		e    spec.Error
		want string
	}{
		{spec.Error{File: "flows.yaml", Flow: "demo", Task: "cond", Field: "precede", Line: 12, Msg: `unknown task "bdy"`},
			`flows.yaml:12: flow "demo" task "cond" field "precede": unknown task "bdy"`},
		{spec.Error{Flow: "demo", Index: 3, Field: "name", Msg: "missing name"}, `flow "demo" task #3 field "name": missing name`},
		{spec.Error{File: "f.json", Msg: "file has no flows"}, `f.json: file has no flows`},
		{spec.Error{Line: 4, Msg: "x"}, `line 4: x`},
	}
	for _, c := range cases {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
	f := mustParse(t, "flows.yaml", "name: demo\ntasks:\n  - {name: a, func: noop, precede: [zz]}\n")
	err := f.Validate(spec.Options{})
	var e *spec.Error
	if !errors.As(err, &e) || e.Task != "a" || e.Field != "precede" || e.Line != 3 || !errors.Is(err, spec.ErrUnknownTask) || errors.Is(err, spec.ErrCycle) {
		t.Errorf("errors.As gave %+v from %v", e, err)
	}
}

func TestParseFormatDetection(t *testing.T) {
	src := `{"name": "j", "tasks": [{"name": "a", "func": "noop"}]}`
	for _, name := range []string{"x.json", "x.yaml", "x", ""} {
		f, err := spec.Parse(name, []byte(src))
		if err != nil || f.Root().Name != "j" {
			t.Errorf("%s: %v", name, err)
		}
	}
	// YAML flow style is not JSON.
	f, err := spec.Parse("x", []byte(`{name: y, tasks: [{name: a, func: noop}]}`))
	if err != nil || f.Root().Name != "y" {
		t.Errorf("yaml flow style: %v", err)
	}
	// Two YAML documents are refused.
	if _, err := spec.Parse("x.yaml", []byte("name: a\n---\nname: b\n")); !errors.Is(err, spec.ErrSyntax) {
		t.Errorf("two documents: %v", err)
	}
	// A self-referencing alias is refused rather than expanded forever.
	if _, err := spec.Parse("x.yaml", []byte("a: &x [*x]\n")); err == nil {
		t.Error("recursive alias accepted")
	}
	// An alias bomb is refused.
	bomb := "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
	if _, err := spec.Parse("bomb.yaml", []byte(bomb)); !errors.Is(err, spec.ErrSyntax) {
		t.Errorf("alias bomb: %v", err)
	}
}

func TestFileJSONInterfaces(t *testing.T) {
	f, err := spec.ReadFile("testdata/valid/multi.json")
	if err != nil {
		t.Fatal(err)
	}
	data, err := f.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var g spec.File
	if err := g.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	spec.StripPositions(f)
	spec.StripPositions(&g)
	if !reflect.DeepEqual(f.Flows, g.Flows) {
		t.Error("JSON round trip differs")
	}
	var fl spec.Flow
	if err := fl.UnmarshalJSON([]byte(`{"name":"x","tasks":[{"name":"a","func":"noop","bogus":1}]}`)); !errors.Is(err, spec.ErrUnknownField) {
		t.Errorf("strict flow decoding: %v", err)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{10 * time.Minute: "10m", time.Hour: "1h", 90 * time.Minute: "1h30m", 30 * time.Second: "30s", 1500 * time.Millisecond: "1.5s", 61 * time.Second: "1m1s"} {
		if got := spec.FormatDuration(d); got != want {
			t.Errorf("%v: %s, want %s", d, got, want)
		}
		if back, err := time.ParseDuration(spec.FormatDuration(d)); err != nil || back != d {
			t.Errorf("%v does not parse back", d)
		}
	}
}
