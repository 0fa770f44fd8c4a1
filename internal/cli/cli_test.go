package cli

import (
	"encoding/hex"
	"strings"
	"testing"
)

func TestShowOutput(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes of text
	for _, c := range []struct{ in, want string }{
		{"6 words\n", `"6 words\n"`},
		{"tab\tok", `"tab\tok"`},
		{"\x00\x01\x02", "000102"},
		{"\xff\xfe text", "fffe2074657874"},
		{strings.Repeat("\x01", 32), strings.Repeat("01", 32)},
		{strings.Repeat("\x01", 40), strings.Repeat("01", 32) + "… (40 bytes)"},
		{long, `"` + strings.Repeat("é", 40) + `"… (200 bytes)`},
	} {
		if got := ShowOutput(hex.EncodeToString([]byte(c.in))); got != c.want {
			t.Errorf("ShowOutput(%q) = %s, want %s", c.in, got, c.want)
		}
	}
	if got := ShowOutput("zz"); got != "zz" {
		t.Errorf("not hex: %s", got)
	}
}
