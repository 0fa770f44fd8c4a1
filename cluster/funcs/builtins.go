package funcs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hetflow/hetflow/cluster/spec"
)

// Built-in names.
const (
	Noop   = "noop"
	Spin   = "spin"
	Sleep  = "sleep"
	Hash   = "hash"
	Loop   = "loop"
	Coin   = "coin"
	Fail   = "fail"
	Panic  = "panic"
	Saxpy  = "saxpy"
	Fanout = "fanout"
	Pick   = "pick"
	Blob   = "blob"
)

// Argument bounds of the built-ins.
const (
	MaxSpinUS     = 1 << 40 // about 12.7 days
	MaxSleepMS    = 1 << 32
	MaxSaxpyN     = 1 << 28 // 2 GiB of float32 vectors
	MaxFanout     = 1 << 20
	MaxBlob       = 64 << 20
	DefaultSaxpyN = 1 << 16
	DefaultSaxpyA = 2.0
)

func builtins() []Entry {
	return []Entry{
		{Name: Noop, CPU: noop, Check: func(a Args) error { return a.Only() }, NoInputs: true, Transient: true, Doc: "does nothing"},
		{Name: Spin, CPU: spin, Check: func(a Args) error { _, err := spinArgs(a); return err }, NoInputs: true, Transient: true, Doc: "{us}: busy CPU work for us microseconds"},
		{Name: Sleep, CPU: sleep, Check: func(a Args) error { _, err := sleepArgs(a); return err }, NoInputs: true, Transient: true, Doc: "{ms}: sleeps ms milliseconds"},
		{Name: Hash, CPU: hash, Check: func(a Args) error { return a.Only() }, Transient: true, Doc: "SHA-256 of the task's name and its strong predecessors' outputs"},
		{Name: Loop, Kind: spec.KindCondition, CPU: loop, Check: func(a Args) error { _, err := loopArgs(a); return err }, Transient: true, Doc: "{n}: condition, 0 on n activations in a row, then 1"},
		{Name: Coin, Kind: spec.KindCondition, CPU: coin, Check: func(a Args) error { _, _, _, err := coinArgs(a); return err }, NoInputs: true, Transient: true, Doc: "{p, seed}: condition, 0 with probability p, else 1"},
		{Name: Fail, CPU: fail, Check: func(a Args) error { _, _, err := failArgs(a); return err }, NoInputs: true, Transient: true, Doc: "{msg, times}: returns an error (on its first `times` executions of an activation)"},
		{Name: Panic, CPU: panicFn, Check: func(a Args) error { _, err := panicArgs(a); return err }, NoInputs: true, Transient: true, Doc: "{msg}: panics"},
		{Name: Saxpy, CPU: saxpyCPU, GPU: saxpyCPU, Graph: saxpyGraph, Check: func(a Args) error { _, _, err := SaxpyArgs(a); return err }, NoInputs: true, Transient: true, Doc: "{n, a}: y = a*x + y over n float32, output the sum of y (float64, 8 bytes little-endian)"},
		{Name: Fanout, Kind: spec.KindSubflow, CPU: fanout, Check: func(a Args) error { _, _, err := fanoutArgs(a); return err }, NoInputs: true, Transient: true, Doc: "{n, us}: subflow of n spin children"},
		{Name: Pick, Kind: spec.KindMultiCondition, CPU: pick, Check: func(a Args) error { _, err := pickArgs(a); return err }, NoInputs: true, Transient: true, Doc: "{choices}: multicondition returning the given indices"},
		{Name: Blob, CPU: blob, Check: func(a Args) error { _, err := blobArgs(a); return err }, NoInputs: true, Transient: true, Doc: "{n}: outputs n bytes, byte i = i mod 256"},
	}
}

// spinSink keeps spin's arithmetic from being optimised away.
var spinSink atomic.Uint64

func noop(_ context.Context, c *Call) (Result, error) { return Result{}, c.Args.Only() }

func spinArgs(a Args) (time.Duration, error) {
	if err := a.Only("us"); err != nil {
		return 0, err
	}
	us, err := a.IntRange("us", 0, 0, MaxSpinUS)
	return time.Duration(us) * time.Microsecond, err
}

// spin burns CPU until us microseconds have passed, checking ctx as it goes.
func spin(ctx context.Context, c *Call) (Result, error) {
	d, err := spinArgs(c.Args)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	done := ctx.Done()
	var sink uint64
	for i := uint64(0); ; i++ {
		sink = sink*6364136223846793005 + i
		if i&63 != 0 {
			continue
		}
		if time.Since(start) >= d {
			break
		}
		select {
		case <-done:
			return Result{}, ctx.Err()
		default:
		}
	}
	spinSink.Store(sink)
	return Result{}, nil
}

func sleepArgs(a Args) (time.Duration, error) {
	if err := a.Only("ms"); err != nil {
		return 0, err
	}
	ms, err := a.IntRange("ms", 0, 0, MaxSleepMS)
	return time.Duration(ms) * time.Millisecond, err
}

func sleep(ctx context.Context, c *Call) (Result, error) {
	d, err := sleepArgs(c.Args)
	if err != nil {
		return Result{}, err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return Result{}, nil
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// HashOf computes the built-in hash: SHA-256 over the UTF-8 bytes of task,
// then the inputs in ascending byte order of their names (a nil or empty
// input adds nothing).
func HashOf(task string, inputs map[string][]byte) [32]byte {
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		names = append(names, n)
	}
	sort.Strings(names) // byte-wise order
	h := sha256.New()
	h.Write([]byte(task))
	for _, n := range names {
		h.Write(inputs[n])
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func hash(_ context.Context, c *Call) (Result, error) {
	if err := c.Args.Only(); err != nil {
		return Result{}, err
	}
	sum := HashOf(c.Task, c.Inputs)
	return Result{Output: sum[:]}, nil
}

func loopArgs(a Args) (int64, error) {
	if err := a.Only("n"); err != nil {
		return 0, err
	}
	if err := a.Need("n"); err != nil {
		return 0, err
	}
	return a.NonNeg("n", 0)
}

// loop keeps in Result.State the number of activations since the run started
// or since it last returned 1 (8 bytes little-endian; none means 0): it
// answers 0 while that count is below n (and counts this activation), and 1
// when it reaches n (resetting it). So with a state the runtime carries from
// activation to activation, it returns 0 n times, then 1, and again.
func loop(_ context.Context, c *Call) (Result, error) {
	n, err := loopArgs(c.Args)
	if err != nil {
		return Result{}, err
	}
	k, err := LoopCount(c.State)
	if err != nil {
		return Result{}, err
	}
	if k < uint64(n) {
		return Result{Choice: 0, State: binary.LittleEndian.AppendUint64(nil, k+1)}, nil
	}
	return Result{Choice: 1}, nil
}

// LoopCount decodes loop's state: how many activations returned 0 since the
// run started or since loop last returned 1.
func LoopCount(state []byte) (uint64, error) {
	switch len(state) {
	case 0:
		return 0, nil
	case 8:
		return binary.LittleEndian.Uint64(state), nil
	}
	return 0, fmt.Errorf("%w: loop state of %d bytes, want 8", ErrBadResult, len(state))
}

func coinArgs(a Args) (p float64, seed int64, seeded bool, err error) {
	if err = a.Only("p", "seed"); err != nil {
		return
	}
	if p, err = a.Prob("p", 0.5); err != nil {
		return
	}
	seeded = a.Has("seed")
	seed, err = a.Int("seed", 0)
	return
}

// CoinDraw is coin's deterministic draw in [0, 1): the first 8 bytes (little
// endian) of SHA-256(seed as 8 bytes little-endian ‖ task ‖ activation as 8
// bytes little-endian), shifted right by 11, divided by 2^53. coin returns 0
// when the draw is below p.
func CoinDraw(seed int64, task string, activation uint64) float64 {
	buf := make([]byte, 0, 16+len(task))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(seed))
	buf = append(buf, task...)
	buf = binary.LittleEndian.AppendUint64(buf, activation)
	sum := sha256.Sum256(buf)
	return float64(binary.LittleEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

func coin(_ context.Context, c *Call) (Result, error) {
	p, seed, seeded, err := coinArgs(c.Args)
	if err != nil {
		return Result{}, err
	}
	var u float64
	if seeded {
		u = CoinDraw(seed, c.Task, c.Activation)
	} else {
		u = rand.Float64()
	}
	if u < p {
		return Result{Choice: 0}, nil
	}
	return Result{Choice: 1}, nil
}

func failArgs(a Args) (string, int64, error) {
	if err := a.Only("msg", "times"); err != nil {
		return "", 0, err
	}
	msg, err := a.String("msg", "fail")
	if err != nil {
		return "", 0, err
	}
	times, err := a.IntRange("times", math.MaxInt64, 0, math.MaxInt64)
	return msg, times, err
}

// fail returns an error matching ErrFailed; with times: k it fails only the
// first k executions of each activation (Call.Attempt < k), for retry tests.
func fail(_ context.Context, c *Call) (Result, error) {
	msg, times, err := failArgs(c.Args)
	if err != nil {
		return Result{}, err
	}
	if int64(c.Attempt) >= times {
		return Result{}, nil
	}
	return Result{}, fmt.Errorf("%w: %s", ErrFailed, msg)
}

func panicArgs(a Args) (string, error) {
	if err := a.Only("msg"); err != nil {
		return "", err
	}
	return a.String("msg", "panic")
}

// panicFn panics with the string "task NAME: MSG".
func panicFn(_ context.Context, c *Call) (Result, error) {
	msg, err := panicArgs(c.Args)
	if err != nil {
		return Result{}, err
	}
	panic("task " + strconv.Quote(c.Task) + ": " + msg)
}

func fanoutArgs(a Args) (int64, time.Duration, error) {
	if err := a.Only("n", "us"); err != nil {
		return 0, 0, err
	}
	if err := a.Need("n"); err != nil {
		return 0, 0, err
	}
	n, err := a.IntRange("n", 0, 0, MaxFanout)
	if err != nil {
		return 0, 0, err
	}
	us, err := a.IntRange("us", 0, 0, MaxSpinUS)
	return n, time.Duration(us) * time.Microsecond, err
}

// fanout spawns n independent spin children named "0" .. "n-1", each with
// the fanout's us.
func fanout(_ context.Context, c *Call) (Result, error) {
	n, d, err := fanoutArgs(c.Args)
	if err != nil {
		return Result{}, err
	}
	us := int64(d / time.Microsecond)
	ch := make([]Child, n)
	for i := range ch {
		ch[i] = Child{Name: strconv.Itoa(i), Func: Spin, Args: Args{"us": us}}
	}
	return Result{Children: ch}, nil
}

func pickArgs(a Args) ([]int, error) {
	if err := a.Only("choices"); err != nil {
		return nil, err
	}
	if err := a.Need("choices"); err != nil {
		return nil, err
	}
	l, err := a.Ints("choices")
	if err != nil {
		return nil, err
	}
	out := make([]int, len(l))
	for i, x := range l {
		if x < 0 || x > math.MaxInt32 {
			return nil, &ArgError{Arg: "choices", Msg: fmt.Sprintf("must be a list of non-negative integers, got %d at position %d", x, i)}
		}
		out[i] = int(x)
	}
	return out, nil
}

func pick(_ context.Context, c *Call) (Result, error) {
	l, err := pickArgs(c.Args)
	if err != nil {
		return Result{}, err
	}
	return Result{Choices: l}, nil
}

func blobArgs(a Args) (int64, error) {
	if err := a.Only("n"); err != nil {
		return 0, err
	}
	return a.IntRange("n", 0, 0, MaxBlob)
}

func blob(_ context.Context, c *Call) (Result, error) {
	n, err := blobArgs(c.Args)
	if err != nil {
		return Result{}, err
	}
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(i)
	}
	return Result{Output: out}, nil
}
