package cli

import (
	"runtime/debug"
	"strings"
)

// Version is what every binary's --version prints: the module version (or
// "devel"), the commit it was built from with "+dirty" for uncommitted
// changes, and the Go version.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return version(bi)
}

func version(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	parts := []string{v}
	if rev != "" && !strings.Contains(v, rev[:min(12, len(rev))]) {
		parts = append(parts, "commit "+rev[:min(12, len(rev))]+dirty)
	}
	return strings.Join(append(parts, bi.GoVersion), ", ")
}
