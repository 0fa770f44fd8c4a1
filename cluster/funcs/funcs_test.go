package funcs_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/spec"
	"github.com/hetflow/hetflow/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func invoke(t *testing.T, name string, c *funcs.Call) funcs.Result {
	t.Helper()
	res, err := funcs.Default().Invoke(context.Background(), name, c)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestDefaultNames(t *testing.T) {
	want := []string{"blob", "coin", "fail", "fanout", "hash", "loop", "noop", "panic", "pick", "saxpy", "sleep", "spin"}
	if got := funcs.Default().Names(); !reflect.DeepEqual(got, want) {
		t.Errorf("names %v", got)
	}
	kinds := map[string]spec.Kind{"loop": spec.KindCondition, "coin": spec.KindCondition, "pick": spec.KindMultiCondition, "fanout": spec.KindSubflow, "hash": spec.KindStatic}
	r := funcs.Default()
	for name, k := range kinds {
		info, ok := r.Func(name)
		if !ok || info.Kind != k || !info.CPU || info.CheckArgs == nil {
			t.Errorf("%s: %+v", name, info)
		}
	}
	if info, _ := r.Func("saxpy"); !info.GPU {
		t.Error("saxpy has no GPU body")
	}
	if info, _ := r.Func("spin"); info.GPU {
		t.Error("spin claims a GPU body")
	}
}

func TestRegister(t *testing.T) {
	r := funcs.Default()
	body := func(context.Context, *funcs.Call) (funcs.Result, error) {
		return funcs.Result{Output: []byte("mine")}, nil
	}
	if err := r.Register(funcs.Entry{Name: "hash", CPU: body}); !errors.Is(err, funcs.ErrDuplicate) {
		t.Errorf("duplicate: %v", err)
	}
	if err := r.Register(funcs.Entry{Name: "m", Kind: spec.KindModule, CPU: body}); !errors.Is(err, funcs.ErrBadEntry) {
		t.Errorf("module kind: %v", err)
	}
	if err := r.Register(funcs.Entry{Name: "empty"}); !errors.Is(err, funcs.ErrBadEntry) {
		t.Errorf("no body: %v", err)
	}
	if err := r.Register(funcs.Entry{Name: "a/b", CPU: body}); !errors.Is(err, funcs.ErrBadEntry) {
		t.Errorf("slash: %v", err)
	}
	if err := r.Register(funcs.Entry{Name: "mine", CPU: body}); err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(context.Background(), "mine", &funcs.Call{Task: "x"})
	if err != nil || string(res.Output) != "mine" {
		t.Errorf("invoke: %q %v", res.Output, err)
	}
	// A GPU body set later by another package.
	if _, err := r.Invoke(context.Background(), "mine", &funcs.Call{Task: "x", Domain: spec.DomainGPU}); !errors.Is(err, funcs.ErrNoGPU) {
		t.Errorf("no gpu body: %v", err)
	}
	gpuBody := func(_ context.Context, c *funcs.Call) (funcs.Result, error) {
		return funcs.Result{Output: []byte{byte(c.Device)}}, nil
	}
	if err := r.SetGPU("mine", gpuBody); err != nil {
		t.Fatal(err)
	}
	res, err = r.Invoke(context.Background(), "mine", &funcs.Call{Task: "x", Domain: spec.DomainGPU, Device: 3})
	if err != nil || !reflect.DeepEqual(res.Output, []byte{3}) {
		t.Errorf("gpu invoke: %v %v", res.Output, err)
	}
	if err := r.SetGPU("loop", gpuBody); !errors.Is(err, funcs.ErrBadEntry) {
		t.Errorf("gpu body on a condition: %v", err)
	}
	if err := r.SetGPU("nope", gpuBody); !errors.Is(err, funcs.ErrUnknown) {
		t.Errorf("unknown: %v", err)
	}
	if _, err := r.Invoke(context.Background(), "nope", &funcs.Call{Task: "x"}); !errors.Is(err, funcs.ErrUnknown) {
		t.Errorf("unknown invoke: %v", err)
	}
}

func TestHash(t *testing.T) {
	b, c := []byte("output of B"), []byte{0, 1, 2}
	// Inputs in ascending byte order of names ("B" < "C" < "a"), nothing for
	// a predecessor without output.
	res := invoke(t, "hash", &funcs.Call{Task: "D", Inputs: map[string][]byte{"a": []byte("x"), "C": c, "B": b, "E": nil}})
	h := sha256.New()
	h.Write([]byte("D"))
	h.Write(b)
	h.Write(c)
	h.Write([]byte("x"))
	if want := h.Sum(nil); !reflect.DeepEqual(res.Output, want) {
		t.Errorf("hash %x, want %x", res.Output, want)
	}
	// No inputs: the hash of the name alone.
	res = invoke(t, "hash", &funcs.Call{Task: "héllo"})
	if want := sha256.Sum256([]byte("héllo")); !reflect.DeepEqual(res.Output, want[:]) {
		t.Errorf("hash of the name %x", res.Output)
	}
	if len(res.Output) != 32 {
		t.Errorf("%d bytes", len(res.Output))
	}
}

// runLoop activates loop again and again, carrying the state as the runtime
// does, and returns its answers.
func runLoop(t *testing.T, n, times int) []int {
	var out []int
	var state []byte
	for a := 1; a <= times; a++ {
		res := invoke(t, "loop", &funcs.Call{Task: "cond", Args: funcs.Args{"n": int64(n)}, Activation: uint64(a), State: state})
		state = res.State
		out = append(out, res.Choice)
	}
	return out
}

func TestLoop(t *testing.T) {
	if got := runLoop(t, 2, 7); !reflect.DeepEqual(got, []int{0, 0, 1, 0, 0, 1, 0}) {
		t.Errorf("n=2: %v", got)
	}
	if got := runLoop(t, 0, 3); !reflect.DeepEqual(got, []int{1, 1, 1}) {
		t.Errorf("n=0: %v", got)
	}
	if _, err := funcs.Default().Invoke(context.Background(), "loop", &funcs.Call{Task: "c", Args: funcs.Args{"n": 1}, State: []byte{1}}); !errors.Is(err, funcs.ErrBadResult) {
		t.Errorf("bad state: %v", err)
	}
	if _, err := funcs.Default().Invoke(context.Background(), "loop", &funcs.Call{Task: "c"}); !errors.Is(err, funcs.ErrBadArg) {
		t.Errorf("missing n: %v", err)
	}
}

func TestCoin(t *testing.T) {
	args := funcs.Args{"p": 0.3, "seed": int64(42)}
	zeros := 0
	const n = 20000
	for a := uint64(1); a <= n; a++ {
		r1 := invoke(t, "coin", &funcs.Call{Task: "F1", Args: args, Activation: a})
		r2 := invoke(t, "coin", &funcs.Call{Task: "F1", Args: args, Activation: a, Attempt: 3, Run: "other"})
		if r1.Choice != r2.Choice {
			t.Fatalf("activation %d: %d then %d", a, r1.Choice, r2.Choice)
		}
		// The documented draw, computed here from its definition.
		buf := binary.LittleEndian.AppendUint64(nil, 42)
		buf = append(buf, "F1"...)
		buf = binary.LittleEndian.AppendUint64(buf, a)
		sum := sha256.Sum256(buf)
		u := float64(binary.LittleEndian.Uint64(sum[:8])>>11) / (1 << 53)
		want := 1
		if u < 0.3 {
			want = 0
			zeros++
		}
		if r1.Choice != want {
			t.Fatalf("activation %d: %d, want %d", a, r1.Choice, want)
		}
	}
	// 0 with probability p: within 5 standard deviations.
	frac, sd := float64(zeros)/n, math.Sqrt(0.3*0.7/n)
	if math.Abs(frac-0.3) > 5*sd {
		t.Errorf("fraction of 0s %.4f, want 0.3 ± %.4f", frac, 5*sd)
	}
	// Different tasks and seeds draw differently.
	same := 0
	for a := uint64(1); a <= 200; a++ {
		if funcs.CoinDraw(1, "F1", a) == funcs.CoinDraw(2, "F1", a) || funcs.CoinDraw(1, "F1", a) == funcs.CoinDraw(1, "F2", a) {
			same++
		}
	}
	if same > 0 {
		t.Errorf("%d identical draws", same)
	}
	// p = 0 and p = 1 are certain; unseeded draws still obey them.
	for a := uint64(1); a < 50; a++ {
		if r := invoke(t, "coin", &funcs.Call{Task: "c", Args: funcs.Args{"p": 0}, Activation: a}); r.Choice != 1 {
			t.Fatal("p=0 gave 0")
		}
		if r := invoke(t, "coin", &funcs.Call{Task: "c", Args: funcs.Args{"p": 1}, Activation: a}); r.Choice != 0 {
			t.Fatal("p=1 gave 1")
		}
	}
}

func TestSaxpy(t *testing.T) {
	for _, tc := range []struct {
		n int
		a float64
	}{{0, 2}, {1, 2}, {1000, 2}, {100003, -0.5}} {
		res := invoke(t, "saxpy", &funcs.Call{Task: "s", Args: funcs.Args{"n": int64(tc.n), "a": tc.a}})
		got, ok := funcs.BytesFloat64(res.Output)
		if !ok {
			t.Fatalf("output %d bytes", len(res.Output))
		}
		// Reference in float64 arithmetic from the definition.
		want, exact := 0.0, 0.0
		for i := 0; i < tc.n; i++ {
			x, y := float64(i%97)/97, float64(i%89)/89
			want += tc.a*x + y
			// And bit-exact: float32 inputs, rounded product, rounded sum.
			x32, y32 := float32(i%97)/97, float32(i%89)/89
			p := float32(float32(tc.a) * x32)
			exact += float64(p + y32)
		}
		if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("n=%d a=%v: %v, float64 reference %v", tc.n, tc.a, got, want)
		}
		if got != exact {
			t.Errorf("n=%d a=%v: %v, float32 reference %v", tc.n, tc.a, got, exact)
		}
	}
	// Defaults and the GPU body (a host reference until the node sets one).
	cpu := invoke(t, "saxpy", &funcs.Call{Task: "s"})
	gpu := invoke(t, "saxpy", &funcs.Call{Task: "s", Domain: spec.DomainGPU})
	if !reflect.DeepEqual(cpu.Output, gpu.Output) {
		t.Error("gpu reference differs")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := funcs.Default().Invoke(ctx, "saxpy", &funcs.Call{Task: "s"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestSpinAndSleep(t *testing.T) {
	start := time.Now()
	invoke(t, "spin", &funcs.Call{Task: "s", Args: funcs.Args{"us": 2000}})
	if el := time.Since(start); el < 2*time.Millisecond {
		t.Errorf("spin returned after %v", el)
	}
	start = time.Now()
	invoke(t, "sleep", &funcs.Call{Task: "s", Args: funcs.Args{"ms": 2}})
	if el := time.Since(start); el < 2*time.Millisecond {
		t.Errorf("sleep returned after %v", el)
	}
	// Both honour cancellation mid-way: a day's work returns at once.
	for _, name := range []string{"spin", "sleep"} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			arg := funcs.Args{"us": int64(86400e6)}
			if name == "sleep" {
				arg = funcs.Args{"ms": int64(86400e3)}
			}
			_, err := funcs.Default().Invoke(ctx, name, &funcs.Call{Task: "s", Args: arg})
			done <- err
		}()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestFailPanic(t *testing.T) {
	r := funcs.Default()
	_, err := r.Invoke(context.Background(), "fail", &funcs.Call{Task: "f", Args: funcs.Args{"msg": "boom"}})
	if !errors.Is(err, funcs.ErrFailed) || err.Error() != `task "f": funcs: task failed: boom` {
		t.Errorf("fail: %v", err)
	}
	args := funcs.Args{"times": 2}
	for attempt, wantErr := range []bool{true, true, false} {
		_, err := r.Invoke(context.Background(), "fail", &funcs.Call{Task: "f", Args: args, Attempt: attempt})
		if (err != nil) != wantErr {
			t.Errorf("attempt %d: %v", attempt, err)
		}
	}
	func() {
		defer func() {
			v := recover()
			if s, ok := v.(string); !ok || !strings.Contains(s, `task "p"`) {
				t.Errorf("panic value %v", v)
			}
		}()
		_, _ = r.Invoke(context.Background(), "panic", &funcs.Call{Task: "p"})
		t.Error("no panic")
	}()
}

func TestFanoutPickBlob(t *testing.T) {
	res := invoke(t, "fanout", &funcs.Call{Task: "B", Args: funcs.Args{"n": 3, "us": 5}})
	want := []funcs.Child{{Name: "0", Func: "spin", Args: funcs.Args{"us": int64(5)}}, {Name: "1", Func: "spin", Args: funcs.Args{"us": int64(5)}}, {Name: "2", Func: "spin", Args: funcs.Args{"us": int64(5)}}}
	if !reflect.DeepEqual(res.Children, want) {
		t.Errorf("children %+v", res.Children)
	}
	if res.Output != nil {
		t.Error("subflow with output")
	}
	res = invoke(t, "pick", &funcs.Call{Task: "m", Args: funcs.Args{"choices": []any{int64(0), int64(2)}}})
	if !reflect.DeepEqual(res.Choices, []int{0, 2}) {
		t.Errorf("pick %v", res.Choices)
	}
	res = invoke(t, "blob", &funcs.Call{Task: "b", Args: funcs.Args{"n": 300}})
	if len(res.Output) != 300 || res.Output[299] != byte(299%256) {
		t.Errorf("blob %d bytes", len(res.Output))
	}
}

func TestCheckChildren(t *testing.T) {
	r := funcs.Default()
	ok := []funcs.Child{{Name: "a", Func: "spin"}, {Name: "b", Func: "hash", Succeed: []string{"a"}}}
	if err := r.CheckChildren(ok); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]funcs.Child{
		"dup":     {{Name: "a", Func: "spin"}, {Name: "a", Func: "spin"}},
		"slash":   {{Name: "a/b", Func: "spin"}},
		"unknown": {{Name: "a", Func: "nope"}},
		"cond":    {{Name: "a", Func: "loop"}},
		"pred":    {{Name: "a", Func: "spin", Succeed: []string{"z"}}},
		"cycle":   {{Name: "a", Func: "spin", Succeed: []string{"b"}}, {Name: "b", Func: "spin", Succeed: []string{"a"}}},
		"args":    {{Name: "a", Func: "spin", Args: funcs.Args{"us": "x"}}},
	} {
		if err := r.CheckChildren(bad); !errors.Is(err, funcs.ErrBadResult) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestArgErrors(t *testing.T) {
	r := funcs.Default()
	cases := []struct {
		fn   string
		args funcs.Args
		want string
	}{
		{"spin", funcs.Args{"us": "abc"}, `task "t": args: "us" must be a non-negative integer, got "abc"`},
		{"spin", funcs.Args{"us": -1}, `task "t": args: "us" must be a non-negative integer, got -1`},
		{"spin", funcs.Args{"us": 1.5}, `task "t": args: "us" must be a non-negative integer, got 1.5`},
		{"spin", funcs.Args{"usec": 1}, `task "t": args: "usec" is not an argument of this function (it takes: us)`},
		{"noop", funcs.Args{"x": 1}, `task "t": args: "x" is not an argument of this function (it takes: no arguments)`},
		{"loop", nil, `task "t": args: "n" is required`},
		{"coin", funcs.Args{"p": "half"}, `task "t": args: "p" must be a probability from 0 to 1, got "half"`},
		{"saxpy", funcs.Args{"n": int64(1) << 40}, `task "t": args: "n" must be at most 268435456, got 1099511627776`},
		{"pick", funcs.Args{"choices": []any{int64(1), "x"}}, `task "t": args: "choices" must be a list of integers, got "x" at position 1`},
		{"fail", funcs.Args{"msg": 3}, `task "t": args: "msg" must be a string, got 3`},
	}
	for _, c := range cases {
		_, err := r.Invoke(context.Background(), c.fn, &funcs.Call{Task: "t", Args: c.args})
		if err == nil || err.Error() != c.want || !errors.Is(err, funcs.ErrBadArg) {
			t.Errorf("%s %v:\ngot  %v\nwant %s", c.fn, c.args, err, c.want)
		}
		var ae *funcs.ArgError
		if !errors.As(err, &ae) || ae.Task != "t" {
			t.Errorf("not an ArgError with the task: %v", err)
		}
	}
	// Whole numbers written as floats (JSON) are integers.
	if _, err := r.Invoke(context.Background(), "spin", &funcs.Call{Task: "t", Args: funcs.Args{"us": 3.0}}); err != nil {
		t.Error(err)
	}
}

func TestInvokeShapesResults(t *testing.T) {
	r := funcs.NewRegistry()
	all := func(context.Context, *funcs.Call) (funcs.Result, error) {
		return funcs.Result{Output: []byte("x"), Choice: 1, Choices: []int{1}, State: []byte("s")}, nil
	}
	r.MustRegister(funcs.Entry{Name: "c", Kind: spec.KindCondition, CPU: all})
	r.MustRegister(funcs.Entry{Name: "s", CPU: all})
	res, _ := r.Invoke(context.Background(), "c", &funcs.Call{Task: "t"})
	if res.Output != nil || res.Choices != nil || res.Choice != 1 || string(res.State) != "s" {
		t.Errorf("condition result %+v", res)
	}
	res, _ = r.Invoke(context.Background(), "s", &funcs.Call{Task: "t"})
	if string(res.Output) != "x" || res.Choice != 0 || res.Choices != nil {
		t.Errorf("static result %+v", res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Invoke(ctx, "s", &funcs.Call{Task: "t"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestValidatesSpec checks the registry as a spec.Catalog: argument errors
// point at the argument's line.
func TestValidatesSpec(t *testing.T) {
	f, err := spec.Parse("f.yaml", []byte("name: x\ntasks:\n  - name: a\n    func: spin\n    args:\n      us: 1\n      extra: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = f.Validate(spec.Options{Funcs: funcs.Default()})
	want := `f.yaml:7: flow "x" task "a" field "args": "extra" is not an argument of this function (it takes: us)`
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	for _, ex := range spec.Examples() {
		f, err := ex.Parse()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Validate(spec.Options{Funcs: funcs.Default()}); err != nil {
			t.Errorf("%s: %v", ex.Name, err)
		}
	}
}

// An output over MaxOutput fails its task, naming the limit; one of
// exactly MaxOutput bytes passes. MaxOutput is what the wire carries.
func TestOutputLimit(t *testing.T) {
	if funcs.MaxOutput != transport.DefaultLimits.MaxOutput {
		t.Fatalf("funcs.MaxOutput %d, transport's %d", funcs.MaxOutput, transport.DefaultLimits.MaxOutput)
	}
	reg := funcs.Default()
	res, err := reg.Invoke(context.Background(), "blob", &funcs.Call{Task: "b", Args: funcs.Args{"n": int64(funcs.MaxOutput)}})
	if err != nil || len(res.Output) != funcs.MaxOutput {
		t.Fatalf("blob of MaxOutput bytes: %d bytes, %v", len(res.Output), err)
	}
	_, err = reg.Invoke(context.Background(), "blob", &funcs.Call{Task: "b", Args: funcs.Args{"n": int64(funcs.MaxOutput + 1)}})
	if !errors.Is(err, funcs.ErrBadResult) || !strings.Contains(err.Error(), "over the limit of 8388608 (8 MiB)") {
		t.Errorf("blob of MaxOutput+1 bytes: %v", err)
	}
}

// The built-ins that read Inputs or State are not registered NoInputs
// (the node would hand them neither); the others are.
func TestNoInputsBuiltins(t *testing.T) {
	reg := funcs.Default()
	if err := reg.EnableExec([]string{"/bin/true"}); err != nil {
		t.Fatal(err)
	}
	reads := map[string]bool{funcs.Hash: true, funcs.Loop: true, "exec": true}
	for _, name := range reg.Names() {
		e, _ := reg.Lookup(name)
		if e.NoInputs == reads[name] {
			t.Errorf("%s: NoInputs %v, but it reads Inputs or State: %v", name, e.NoInputs, reads[name])
		}
	}
}

// Every built-in but exec is Transient (none keeps its Call: the node
// reuses them); exec, which starts a process, is left out. Release takes a
// Call back so that nothing of it is left.
func TestTransientBuiltins(t *testing.T) {
	reg := funcs.Default()
	if err := reg.EnableExec([]string{"/bin/true"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range reg.Names() {
		e, _ := reg.Lookup(name)
		if e.Transient == (name == "exec") {
			t.Errorf("%s: Transient %v", name, e.Transient)
		}
	}
	// A GPU body set on a Transient built-in made no promise of its own.
	if err := reg.SetGPU(funcs.Saxpy, func(context.Context, *funcs.Call) (funcs.Result, error) { return funcs.Result{}, nil }); err != nil {
		t.Fatal(err)
	}
	if e, _ := reg.Lookup(funcs.Saxpy); e.Transient {
		t.Error("saxpy with a GPU body of its own: still Transient")
	}
	c := funcs.Call{Run: "r", Task: "t", Path: "m/t", Args: funcs.Args{"n": 1}, Inputs: map[string][]byte{"a": nil},
		Activation: 3, Attempt: 1, Domain: spec.DomainGPU, Device: 2, State: []byte("s")}
	// Release clears field by field: a field added to Call must be set
	// here, and so cleared there.
	for i, cv := 0, reflect.ValueOf(c); i < cv.NumField(); i++ {
		if cv.Field(i).IsZero() {
			t.Fatalf("Call.%s is not set before Release", cv.Type().Field(i).Name)
		}
	}
	funcs.Release(&c)
	if want := (funcs.Call{Run: funcs.Released, Task: funcs.Released, Path: funcs.Released}); !reflect.DeepEqual(c, want) {
		t.Errorf("released Call %+v, want %+v", c, want)
	}
}

// A bound body does what Invoke by name does: the same result, the same
// errors, the kind's fields dropped; Bind refuses what Invoke would.
func TestBindInvokesAsInvoke(t *testing.T) {
	reg := funcs.Default()
	ctx := context.Background()
	in := map[string][]byte{"a": []byte("x")}
	for _, c := range []struct {
		name string
		call funcs.Call
	}{
		{funcs.Hash, funcs.Call{Task: "h", Inputs: in}},
		{funcs.Noop, funcs.Call{Task: "n"}},
		{funcs.Noop, funcs.Call{Task: "bad", Args: funcs.Args{"x": 1}}},
		{funcs.Loop, funcs.Call{Task: "l", Args: funcs.Args{"n": int64(2)}}},
		{funcs.Fail, funcs.Call{Task: "f"}},
	} {
		b, err := reg.Bind(c.name, spec.DomainCPU)
		if err != nil {
			t.Fatal(err)
		}
		e, _ := reg.Lookup(c.name)
		if b.NoInputs() != e.NoInputs {
			t.Errorf("%s: bound NoInputs %v, entry %v", c.name, b.NoInputs(), e.NoInputs)
		}
		if b.Transient() != e.Transient {
			t.Errorf("%s: bound Transient %v, entry %v", c.name, b.Transient(), e.Transient)
		}
		c1, c2 := c.call, c.call
		r1, err1 := reg.Invoke(ctx, c.name, &c1)
		r2, err2 := b.Invoke(ctx, &c2)
		if !reflect.DeepEqual(r1, r2) || fmt.Sprint(err1) != fmt.Sprint(err2) {
			t.Errorf("%s: Invoke %+v %v, bound %+v %v", c.name, r1, err1, r2, err2)
		}
	}
	if _, err := reg.Bind("nope", spec.DomainCPU); !errors.Is(err, funcs.ErrUnknown) {
		t.Errorf("bind of an unknown function: %v", err)
	}
	if _, err := reg.Bind(funcs.Noop, spec.DomainGPU); !errors.Is(err, funcs.ErrNoGPU) {
		t.Errorf("bind of a CPU function for gpu: %v", err)
	}
}

// A Result is 112 bytes, seven 16-byte moves: its padding keeps the
// compiler's copies and zeroing from writing its last 16 bytes over the 16
// before (at 104 they did), where the copy after one of them loads 16
// bytes from two 8-byte stores and waits for both to reach the cache (see
// Result's padding, BenchmarkBoundNoop). A field added or removed must
// keep the size a multiple of 16.
func TestResultIs112Bytes(t *testing.T) {
	if n := unsafe.Sizeof(funcs.Result{}); n != 112 {
		t.Fatalf("a Result is %d bytes, want 112 (a multiple of 16: adjust its padding)", n)
	}
}

// Invoke, Bound.Invoke and Bound.InvokeTo leave no Result on an error,
// whatever the function returned with it and whatever *res held: the
// node's activation does not clear the Result after an error of theirs.
func TestInvokeLeavesNoResultOnAnError(t *testing.T) {
	r := funcs.NewRegistry()
	both := func(context.Context, *funcs.Call) (funcs.Result, error) {
		return funcs.Result{Output: []byte("x"), Choice: 1, State: []byte("s")}, errors.New("boom")
	}
	big := func(context.Context, *funcs.Call) (funcs.Result, error) {
		return funcs.Result{Output: make([]byte, funcs.MaxOutput+1), State: []byte("s")}, nil
	}
	badKids := func(context.Context, *funcs.Call) (funcs.Result, error) {
		return funcs.Result{Children: []funcs.Child{{Name: "a/b", Func: funcs.Noop}}, State: []byte("s")}, nil
	}
	r.MustRegister(funcs.Entry{Name: "both", CPU: both})
	r.MustRegister(funcs.Entry{Name: "big", CPU: big})
	r.MustRegister(funcs.Entry{Name: "kids", Kind: spec.KindSubflow, CPU: badKids})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	show := func(r funcs.Result) string { // not the big one's 8 MiB
		return fmt.Sprintf("{%d output bytes, choice %d, choices %v, %d children, state %q}", len(r.Output), r.Choice, r.Choices, len(r.Children), r.State)
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"both", context.Background()}, {"big", context.Background()}, {"kids", context.Background()}, {"both", cancelled}} {
		res, err := r.Invoke(c.ctx, c.name, &funcs.Call{Task: "t"})
		if err == nil || !reflect.DeepEqual(res, funcs.Result{}) {
			t.Errorf("%s: Invoke: %s, %v", c.name, show(res), err)
		}
		b, err := r.Bind(c.name, spec.DomainCPU)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := b.Invoke(c.ctx, &funcs.Call{Task: "t"}); err == nil || !reflect.DeepEqual(res, funcs.Result{}) {
			t.Errorf("%s: Bound.Invoke: %s, %v", c.name, show(res), err)
		}
		res = funcs.Result{Output: []byte("stale"), Choices: []int{2}}
		if err := b.InvokeTo(c.ctx, &funcs.Call{Task: "t"}, &res); err == nil || !reflect.DeepEqual(res, funcs.Result{}) {
			t.Errorf("%s: Bound.InvokeTo: %s, %v", c.name, show(res), err)
		}
	}
}
