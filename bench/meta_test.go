package bench

import "testing"

// TimedSim names the profile of results made on the timed sim: from
// sim_profile, or from the note of results written before that field (the
// committed docs/bench/cluster_htdg_modeled.json), so a replot of them
// still says modeled; plain sim results name none.
func TestMetaTimedSim(t *testing.T) {
	for _, c := range []struct {
		m    Meta
		want string
	}{
		{Meta{SimProfile: "h100"}, "h100"},
		{Meta{Notes: []string{EqualWorkersNote, "GPU tasks ran on timed sim devices (profile h200, not calibrated against hardware): every time is MODELED device time plus real CPU time"}}, "h200"},
		{Meta{Notes: []string{EqualWorkersNote, "GPU tasks ran on sim devices (on the CPU): the CUDA figures are missing"}}, ""},
		{Meta{}, ""},
	} {
		if got := c.m.TimedSim(); got != c.want {
			t.Errorf("%+v: TimedSim %q, want %q", c.m, got, c.want)
		}
	}
}
