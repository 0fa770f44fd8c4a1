package gpu

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// SimProfileEnv is the environment variable that turns on the timed sim: a built-in profile
// name (see Profiles) or the path of a JSON profile file. Unset, empty or "off": the plain sim,
// whose device time is just the CPU time of the Go bodies. The cuda backend ignores it.
const SimProfileEnv = "HETFLOW_SIM_PROFILE"

// Work is what a kernel launch declares it does, for the timed sim's roofline: bytes moved to
// and from device memory and floating-point operations. The zero Work means "not declared".
type Work struct {
	Bytes int64 // device-memory traffic, reads plus writes
	Flops int64 // floating-point operations (an FMA counts 2)
}

// Profile is a device model for the timed sim: the figures it charges device time from. It is
// data: a built-in (Profiles) or a JSON file with these fields (durations in nanoseconds).
// Kernel time is KernelOverhead + max(Bytes/MemBandwidth, Flops/FP32) (a roofline), or, for a
// kernel that declares no Work, KernelOverhead + the time its Go body took. A copy between host
// and device takes CopyLatency + bytes/bandwidth of its direction; a device-to-device copy or a
// memset is a kernel moving 2×bytes or bytes. LaunchLatency is the time from the host's
// submission (a graph launch, a stream operation) to the device's first possible start.
type Profile struct {
	Name   string `json:"name"`
	Source string `json:"source,omitempty"` // where the figures come from

	MemBandwidth   float64       `json:"mem_bytes_per_s"` // device memory (HBM)
	FP32           float64       `json:"fp32_flops_per_s"`
	H2DBandwidth   float64       `json:"h2d_bytes_per_s"` // host link, host to device
	D2HBandwidth   float64       `json:"d2h_bytes_per_s"` // host link, device to host
	CopyLatency    time.Duration `json:"copy_latency_ns"`
	LaunchLatency  time.Duration `json:"launch_latency_ns"`
	KernelOverhead time.Duration `json:"kernel_overhead_ns"`

	// Slack is how far the model may run ahead of wall time before a host thread waiting on
	// the device sleeps (a host setting, not a device figure: Go timers fire 0.1–1 ms late
	// under load, device operations take µs). 0 means DefaultSlack.
	Slack time.Duration `json:"timer_slack_ns,omitempty"`
}

// DefaultSlack is Profile.Slack when a profile leaves it 0.
const DefaultSlack = 2 * time.Millisecond

// H200 is the default profile: one NVIDIA H200 SXM (141 GB HBM3e) on PCIe Gen5 x16.
// NOT calibrated against hardware (no GPU was available when it was written):
//   - MemBandwidth 4.8 TB/s and FP32 67 TFLOP/s (non-tensor): the H200 datasheet
//     (nvidia.com/en-us/data-center/h200, "H200 SXM"); peaks, so the roofline is optimistic.
//   - Host link 55 GB/s each way: PCIe Gen5 x16 is 64 GB/s per direction (the datasheet's
//     "PCIe Gen5: 128GB/s" is both directions); ~85% of it is what pinned copies usually
//     reach. An assumption, not a measurement.
//   - LaunchLatency 4 µs, KernelOverhead 2 µs, CopyLatency 2 µs: the few-µs launch costs NVIDIA
//     reports for short kernels ("Getting Started with CUDA Graphs", NVIDIA developer blog,
//     2019: ~3–4 µs per kernel launched on a stream, less inside a graph); magnitudes, not
//     measurements of this GPU.
//
// gpu/cuda/check.sh on a GPU machine is where a calibration would come from.
var H200 = Profile{
	Name:           "h200",
	Source:         "H200 SXM datasheet peaks (4.8 TB/s HBM3e, 67 TFLOP/s FP32); PCIe Gen5 x16 at an assumed 55 GB/s each way; µs launch costs from NVIDIA's CUDA Graphs blog (2019); not calibrated against hardware",
	MemBandwidth:   4.8e12,
	FP32:           67e12,
	H2DBandwidth:   55e9,
	D2HBandwidth:   55e9,
	CopyLatency:    2 * time.Microsecond,
	LaunchLatency:  4 * time.Microsecond,
	KernelOverhead: 2 * time.Microsecond,
}

// H100 is an NVIDIA H100 SXM5 (80 GB HBM3): as H200 but 3.35 TB/s of device memory (the H100
// datasheet); not calibrated against hardware either.
var H100 = func() Profile {
	p := H200
	p.Name = "h100"
	p.Source = "H100 SXM5 datasheet peaks (3.35 TB/s HBM3, 67 TFLOP/s FP32); link and launch figures as h200; not calibrated against hardware"
	p.MemBandwidth = 3.35e12
	return p
}()

// Profiles are the built-in profiles by name; H200 is the default.
var Profiles = map[string]Profile{"h200": H200, "h100": H100}

// LookupProfile resolves what SimProfileEnv (or a -sim-profile flag) holds: "" or "off" gives
// nil (the plain sim), a built-in name its profile, anything else is read as a JSON file.
func LookupProfile(v string) (*Profile, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "off" {
		return nil, nil
	}
	if p, ok := Profiles[v]; ok {
		return &p, nil
	}
	if !strings.ContainsAny(v, `/\.`) {
		names := make([]string, 0, len(Profiles))
		for n := range Profiles {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("%w: sim profile %q is not a built-in (%s) nor a file path", ErrConfig, v, strings.Join(names, ", "))
	}
	b, err := os.ReadFile(v)
	if err != nil {
		return nil, fmt.Errorf("%w: sim profile: %w", ErrConfig, err)
	}
	return ParseProfile(b, v)
}

// ParseProfile reads a JSON profile (unknown fields are an error); where names the source in
// errors.
func ParseProfile(b []byte, where string) (*Profile, error) {
	var p Profile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: sim profile %s: %w", ErrConfig, where, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sim profile %s: %w", where, err)
	}
	return &p, nil
}

// Validate reports the first figure that is missing or out of range.
func (p *Profile) Validate() error {
	rates := []struct {
		name string
		v    float64
	}{{"mem_bytes_per_s", p.MemBandwidth}, {"fp32_flops_per_s", p.FP32}, {"h2d_bytes_per_s", p.H2DBandwidth}, {"d2h_bytes_per_s", p.D2HBandwidth}}
	for _, r := range rates {
		if !(r.v > 0) || math.IsInf(r.v, 0) {
			return fmt.Errorf("%w: profile %q: %s = %v, want a positive rate", ErrConfig, p.Name, r.name, r.v)
		}
	}
	durs := []struct {
		name string
		v    time.Duration
	}{{"copy_latency_ns", p.CopyLatency}, {"launch_latency_ns", p.LaunchLatency}, {"kernel_overhead_ns", p.KernelOverhead}, {"timer_slack_ns", p.Slack}}
	for _, d := range durs {
		if d.v < 0 || d.v > time.Second {
			return fmt.Errorf("%w: profile %q: %s = %d, want 0 to 1e9", ErrConfig, p.Name, d.name, int64(d.v))
		}
	}
	if p.Name == "" {
		return fmt.Errorf("%w: profile has no name", ErrConfig)
	}
	return nil
}

func (p *Profile) slack() time.Duration {
	if p.Slack > 0 {
		return p.Slack
	}
	return DefaultSlack
}

func seconds(s float64) time.Duration { return time.Duration(math.Ceil(s * 1e9)) }

// KernelTime is the modelled device time of a kernel that declares w: KernelOverhead plus the
// roofline max(w.Bytes/MemBandwidth, w.Flops/FP32).
func (p *Profile) KernelTime(w Work) time.Duration {
	return p.KernelOverhead + seconds(max(float64(w.Bytes)/p.MemBandwidth, float64(w.Flops)/p.FP32))
}

// CopyTime is the modelled device time of a copy of bytes in direction k (KindH2D, KindD2H,
// KindD2D) or of a memset (KindMemset) of bytes.
func (p *Profile) CopyTime(k NodeKind, bytes int) time.Duration {
	b := float64(bytes)
	switch k {
	case KindH2D:
		return p.CopyLatency + seconds(b/p.H2DBandwidth)
	case KindD2H:
		return p.CopyLatency + seconds(b/p.D2HBandwidth)
	case KindD2D:
		return p.KernelTime(Work{Bytes: 2 * int64(bytes)})
	case KindMemset:
		return p.KernelTime(Work{Bytes: int64(bytes)})
	}
	return 0
}
