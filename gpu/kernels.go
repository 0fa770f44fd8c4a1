package gpu

import (
	"errors"
	"fmt"
	"math"
	"reflect"
)

// BlockSize is the block size the helpers in this file launch with.
const BlockSize = 256

var (
	tI32  = reflect.TypeFor[int32]()
	tF32  = reflect.TypeFor[float32]()
	tBF32 = reflect.TypeFor[*Buffer[float32]]()
	tBI32 = reflect.TypeFor[*Buffer[int32]]()
)

// Saxpy is y[i] = a*x[i] + y[i] for i < n; arguments (n int32, a float32, x, y *Buffer[float32]),
// one thread per element. The product is rounded before the add (no fused multiply-add) in
// both bodies, so sim and cuda agree bit for bit.
//
//	extern "C" __global__ void saxpy(int n, float a, const float *x, float *y) {
//	    int i = blockIdx.x * blockDim.x + threadIdx.x;
//	    if (i < n) y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
//	}
var Saxpy = &Kernel{
	Name:   "saxpy",
	PTX:    saxpyPTX,
	Params: []reflect.Type{tI32, tF32, tBF32, tBF32},
	// read x and y, write y; a multiply and an add per element
	Work: func(_, _ Dim3, args []any) Work {
		n := int64(args[0].(int32))
		return Work{Bytes: 12 * n, Flops: 2 * n}
	},
	Go: func(b *Block, args []any) {
		n := int(args[0].(int32))
		a := args[1].(float32)
		x := args[2].(*Buffer[float32]).Mem(b)
		y := args[3].(*Buffer[float32]).Mem(b)
		lo, hi := b.Range()
		hi = min(hi, n)
		for i := lo; i < hi; i++ {
			y[i] = float32(a*x[i]) + y[i]
		}
	},
}

const saxpyPTX = `
.version 7.0
.target sm_52
.address_size 64

.visible .entry saxpy(
	.param .u32 saxpy_n,
	.param .f32 saxpy_a,
	.param .u64 saxpy_x,
	.param .u64 saxpy_y
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .f32 %f<6>;
	.reg .b64 %rd<8>;

	ld.param.u32 %r1, [saxpy_n];
	ld.param.f32 %f1, [saxpy_a];
	ld.param.u64 %rd1, [saxpy_x];
	ld.param.u64 %rd2, [saxpy_y];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.s32 %p1, %r5, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd3, %rd1;
	cvta.to.global.u64 %rd4, %rd2;
	mul.wide.s32 %rd5, %r5, 4;
	add.s64 %rd6, %rd3, %rd5;
	add.s64 %rd7, %rd4, %rd5;
	ld.global.f32 %f2, [%rd6];
	ld.global.f32 %f3, [%rd7];
	mul.rn.f32 %f4, %f1, %f2;
	add.rn.f32 %f5, %f4, %f3;
	st.global.f32 [%rd7], %f5;
DONE:
	ret;
}
`

// SaxpyAsync queues y = a*x + y over the first n elements on s: a stream-based library call,
// the kind of function a capture node records (the seed's Listing 8).
func SaxpyAsync(s *Stream, n int, a float32, x, y *Buffer[float32]) error {
	if n <= 0 || n > x.Len() || n > y.Len() || n > 1<<31-1 {
		return fmt.Errorf("%w: SaxpyAsync over %d elements of %v and %v", ErrInvalid, n, x, y)
	}
	return s.Launch(Saxpy, D1(Blocks(n, BlockSize)), D1(BlockSize), int32(n), a, x, y)
}

// SaxpyNode adds y = a*x + y over the first n elements to g.
func SaxpyNode(g *Graph, n int, a float32, x, y *Buffer[float32]) *Node {
	if n <= 0 || n > 1<<31-1 {
		return g.add(nil, fmt.Errorf("%w: saxpy over %d elements", ErrInvalid, n), "kernel saxpy")
	}
	if x != nil && y != nil && (n > x.Len() || n > y.Len()) {
		return g.add(nil, fmt.Errorf("%w: saxpy over %d elements of %v and %v", ErrInvalid, n, x, y), "kernel saxpy")
	}
	return g.Kernel(Saxpy, D1(Blocks(n, BlockSize)), D1(BlockSize), int32(n), a, x, y)
}

// KMeansAssign assigns each 2-D point to its nearest centroid and accumulates per-cluster sums
// and counts: for i < n, assign[i] = argmin_j (px[i]-mx[j])² + (py[i]-my[j])² (lowest j on
// ties), sx[a] += px[i], sy[a] += py[i], c[a] += 1. Arguments (n, k int32, px, py, mx, my
// *Buffer[float32], assign *Buffer[int32], sx, sy *Buffer[float32], c *Buffer[int32]). sx, sy
// and c must be zeroed first. On cuda the sums are atomic adds, whose order varies, so sums can
// differ from sim's in the last bits; assignments and counts agree exactly.
//
//	extern "C" __global__ void kmeans_assign(int n, int k, const float *px, const float *py,
//	        const float *mx, const float *my, int *assign, float *sx, float *sy, int *c) {
//	    int i = blockIdx.x * blockDim.x + threadIdx.x;
//	    if (i >= n) return;
//	    float x = px[i], y = py[i], best = FLT_MAX;
//	    int bj = 0;
//	    for (int j = 0; j < k; j++) {
//	        float dx = __fsub_rn(x, mx[j]), dy = __fsub_rn(y, my[j]);
//	        float d = __fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy));
//	        if (d < best) { best = d; bj = j; }
//	    }
//	    assign[i] = bj;
//	    atomicAdd(&sx[bj], x); atomicAdd(&sy[bj], y); atomicAdd(&c[bj], 1);
//	}
var KMeansAssign = &Kernel{
	Name:   "kmeans_assign",
	PTX:    kmeansAssignPTX,
	Params: []reflect.Type{tI32, tI32, tBF32, tBF32, tBF32, tBF32, tBI32, tBF32, tBF32, tBI32},
	// per point: read px, py, write assign, three atomic adds (read+write 4 bytes each);
	// the k centroids once; 6 flops per point and centroid (2 sub, 2 mul, add, compare)
	Work: func(_, _ Dim3, args []any) Work {
		n, k := int64(args[0].(int32)), int64(args[1].(int32))
		return Work{Bytes: n*(12+24) + 8*k, Flops: 6 * n * k}
	},
	Go: func(b *Block, args []any) {
		n := int(args[0].(int32))
		k := int(args[1].(int32))
		px := args[2].(*Buffer[float32]).Mem(b)
		py := args[3].(*Buffer[float32]).Mem(b)
		mx := args[4].(*Buffer[float32]).Mem(b)[:k]
		my := args[5].(*Buffer[float32]).Mem(b)[:k]
		assign := args[6].(*Buffer[int32]).Mem(b)
		sx := args[7].(*Buffer[float32]).Mem(b)
		sy := args[8].(*Buffer[float32]).Mem(b)
		c := args[9].(*Buffer[int32]).Mem(b)
		lo, hi := b.Range()
		hi = min(hi, n)
		for i := lo; i < hi; i++ {
			x, y := px[i], py[i]
			best, bj := float32(math.MaxFloat32), 0
			for j := range mx {
				dx, dy := x-mx[j], y-my[j]
				d := float32(dx*dx) + float32(dy*dy)
				if d < best {
					best, bj = d, j
				}
			}
			assign[i] = int32(bj)
			sx[bj] += x
			sy[bj] += y
			c[bj]++
		}
	},
}

const kmeansAssignPTX = `
.version 7.0
.target sm_52
.address_size 64

.visible .entry kmeans_assign(
	.param .u32 ka_n,
	.param .u32 ka_k,
	.param .u64 ka_px,
	.param .u64 ka_py,
	.param .u64 ka_mx,
	.param .u64 ka_my,
	.param .u64 ka_assign,
	.param .u64 ka_sx,
	.param .u64 ka_sy,
	.param .u64 ka_c
)
{
	.reg .pred %p<4>;
	.reg .b32 %r<10>;
	.reg .f32 %f<12>;
	.reg .b64 %rd<32>;

	ld.param.u32 %r1, [ka_n];
	ld.param.u32 %r2, [ka_k];
	ld.param.u64 %rd1, [ka_px];
	ld.param.u64 %rd2, [ka_py];
	ld.param.u64 %rd3, [ka_mx];
	ld.param.u64 %rd4, [ka_my];
	ld.param.u64 %rd5, [ka_assign];
	ld.param.u64 %rd6, [ka_sx];
	ld.param.u64 %rd7, [ka_sy];
	ld.param.u64 %rd8, [ka_c];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r6, %r3, %r4, %r5;
	setp.ge.s32 %p1, %r6, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd11, %rd1;
	cvta.to.global.u64 %rd12, %rd2;
	cvta.to.global.u64 %rd13, %rd3;
	cvta.to.global.u64 %rd14, %rd4;
	cvta.to.global.u64 %rd15, %rd5;
	cvta.to.global.u64 %rd16, %rd6;
	cvta.to.global.u64 %rd17, %rd7;
	cvta.to.global.u64 %rd18, %rd8;
	mul.wide.s32 %rd9, %r6, 4;
	add.s64 %rd19, %rd11, %rd9;
	ld.global.f32 %f1, [%rd19];
	add.s64 %rd20, %rd12, %rd9;
	ld.global.f32 %f2, [%rd20];
	mov.f32 %f3, 0f7F7FFFFF;
	mov.u32 %r7, 0;
	mov.u32 %r8, 0;
	mov.u64 %rd21, %rd13;
	mov.u64 %rd22, %rd14;
LOOP:
	setp.ge.s32 %p2, %r8, %r2;
	@%p2 bra FOUND;
	ld.global.f32 %f4, [%rd21];
	ld.global.f32 %f5, [%rd22];
	sub.rn.f32 %f6, %f1, %f4;
	sub.rn.f32 %f7, %f2, %f5;
	mul.rn.f32 %f8, %f6, %f6;
	mul.rn.f32 %f9, %f7, %f7;
	add.rn.f32 %f10, %f8, %f9;
	setp.lt.f32 %p3, %f10, %f3;
	selp.b32 %r7, %r8, %r7, %p3;
	selp.f32 %f3, %f10, %f3, %p3;
	add.s32 %r8, %r8, 1;
	add.s64 %rd21, %rd21, 4;
	add.s64 %rd22, %rd22, 4;
	bra.uni LOOP;
FOUND:
	add.s64 %rd23, %rd15, %rd9;
	st.global.u32 [%rd23], %r7;
	mul.wide.s32 %rd24, %r7, 4;
	add.s64 %rd25, %rd16, %rd24;
	red.global.add.f32 [%rd25], %f1;
	add.s64 %rd26, %rd17, %rd24;
	red.global.add.f32 [%rd26], %f2;
	add.s64 %rd27, %rd18, %rd24;
	red.global.add.s32 [%rd27], 1;
DONE:
	ret;
}
`

// KMeansUpdate moves each centroid to the mean of its points: for j < k with c[j] > 0,
// mx[j] = sx[j]/c[j], my[j] = sy[j]/c[j]; a centroid with no points stays where it is.
// Arguments (k int32, mx, my, sx, sy *Buffer[float32], c *Buffer[int32]).
//
//	extern "C" __global__ void kmeans_update(int k, float *mx, float *my,
//	        const float *sx, const float *sy, const int *c) {
//	    int j = blockIdx.x * blockDim.x + threadIdx.x;
//	    if (j >= k || c[j] < 1) return;
//	    float n = (float)c[j];
//	    mx[j] = __fdiv_rn(sx[j], n); my[j] = __fdiv_rn(sy[j], n);
//	}
var KMeansUpdate = &Kernel{
	Name:   "kmeans_update",
	PTX:    kmeansUpdatePTX,
	Params: []reflect.Type{tI32, tBF32, tBF32, tBF32, tBF32, tBI32},
	// per cluster: read sx, sy, c, write mx, my; two divisions
	Work: func(_, _ Dim3, args []any) Work {
		k := int64(args[0].(int32))
		return Work{Bytes: 20 * k, Flops: 2 * k}
	},
	Go: func(b *Block, args []any) {
		k := int(args[0].(int32))
		mx := args[1].(*Buffer[float32]).Mem(b)
		my := args[2].(*Buffer[float32]).Mem(b)
		sx := args[3].(*Buffer[float32]).Mem(b)
		sy := args[4].(*Buffer[float32]).Mem(b)
		c := args[5].(*Buffer[int32]).Mem(b)
		lo, hi := b.Range()
		hi = min(hi, k)
		for j := lo; j < hi; j++ {
			if c[j] < 1 {
				continue
			}
			n := float32(c[j])
			mx[j] = sx[j] / n
			my[j] = sy[j] / n
		}
	},
}

const kmeansUpdatePTX = `
.version 7.0
.target sm_52
.address_size 64

.visible .entry kmeans_update(
	.param .u32 ku_k,
	.param .u64 ku_mx,
	.param .u64 ku_my,
	.param .u64 ku_sx,
	.param .u64 ku_sy,
	.param .u64 ku_c
)
{
	.reg .pred %p<3>;
	.reg .b32 %r<8>;
	.reg .f32 %f<6>;
	.reg .b64 %rd<24>;

	ld.param.u32 %r1, [ku_k];
	ld.param.u64 %rd1, [ku_mx];
	ld.param.u64 %rd2, [ku_my];
	ld.param.u64 %rd3, [ku_sx];
	ld.param.u64 %rd4, [ku_sy];
	ld.param.u64 %rd5, [ku_c];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.s32 %p1, %r5, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd11, %rd1;
	cvta.to.global.u64 %rd12, %rd2;
	cvta.to.global.u64 %rd13, %rd3;
	cvta.to.global.u64 %rd14, %rd4;
	cvta.to.global.u64 %rd15, %rd5;
	mul.wide.s32 %rd6, %r5, 4;
	add.s64 %rd16, %rd15, %rd6;
	ld.global.u32 %r6, [%rd16];
	setp.lt.s32 %p2, %r6, 1;
	@%p2 bra DONE;
	cvt.rn.f32.s32 %f1, %r6;
	add.s64 %rd17, %rd13, %rd6;
	ld.global.f32 %f2, [%rd17];
	div.rn.f32 %f3, %f2, %f1;
	add.s64 %rd18, %rd11, %rd6;
	st.global.f32 [%rd18], %f3;
	add.s64 %rd19, %rd14, %rd6;
	ld.global.f32 %f4, [%rd19];
	div.rn.f32 %f5, %f4, %f1;
	add.s64 %rd20, %rd12, %rd6;
	st.global.f32 [%rd20], %f5;
DONE:
	ret;
}
`

// KMeans is the device side of one 2-D k-means problem: points (PX, PY), centroids (MX, MY),
// the assignment of each point, and the per-cluster sums and counts the update step uses.
type KMeans struct {
	N, K   int
	PX, PY *Buffer[float32] // N points
	MX, MY *Buffer[float32] // K centroids
	Assign *Buffer[int32]   // N cluster indices
	SX, SY *Buffer[float32] // K sums
	C      *Buffer[int32]   // K counts
}

// NewKMeans allocates the buffers of an n-point, k-cluster problem on d.
func NewKMeans(d *Device, n, k int) (*KMeans, error) {
	if n <= 0 || k <= 0 || n > 1<<31-1 || k > 1<<31-1 {
		return nil, fmt.Errorf("%w: NewKMeans(n=%d, k=%d)", ErrInvalid, n, k)
	}
	km := &KMeans{N: n, K: k}
	var err error
	f := func(n int) *Buffer[float32] {
		b, e := Alloc[float32](d, n)
		err = errors.Join(err, e)
		return b
	}
	i := func(n int) *Buffer[int32] {
		b, e := Alloc[int32](d, n)
		err = errors.Join(err, e)
		return b
	}
	km.PX, km.PY, km.MX, km.MY = f(n), f(n), f(k), f(k)
	km.Assign, km.SX, km.SY, km.C = i(n), f(k), f(k), i(k)
	if err != nil {
		km.Free()
		return nil, err
	}
	return km, nil
}

// Free frees every buffer.
func (km *KMeans) Free() error {
	var err error
	for _, b := range []*Buffer[float32]{km.PX, km.PY, km.MX, km.MY, km.SX, km.SY} {
		if b != nil {
			err = errors.Join(err, b.Free())
		}
	}
	for _, b := range []*Buffer[int32]{km.Assign, km.C} {
		if b != nil {
			err = errors.Join(err, b.Free())
		}
	}
	return err
}

// Step adds one k-means iteration to g: zero the sums and counts, assign every point
// (KMeansAssign), then move the centroids (KMeansUpdate). It returns the first nodes (the
// memsets, to be preceded by whatever loads the data) and the last node.
func (km *KMeans) Step(g *Graph) (first []*Node, last *Node) {
	zx := Memset(g, km.SX, 0).Name("zero_sx")
	zy := Memset(g, km.SY, 0).Name("zero_sy")
	zc := Memset(g, km.C, 0).Name("zero_c")
	assign := g.Kernel(KMeansAssign, D1(Blocks(km.N, BlockSize)), D1(BlockSize),
		int32(km.N), int32(km.K), km.PX, km.PY, km.MX, km.MY, km.Assign, km.SX, km.SY, km.C).Name("assign")
	update := g.Kernel(KMeansUpdate, D1(Blocks(km.K, BlockSize)), D1(BlockSize),
		int32(km.K), km.MX, km.MY, km.SX, km.SY, km.C).Name("update")
	assign.Succeed(zx, zy, zc)
	update.Succeed(assign)
	return []*Node{zx, zy, zc}, update
}
