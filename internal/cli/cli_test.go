package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/proto"
)

func TestCodeOf(t *testing.T) {
	if CodeOf(nil, "") != nil {
		t.Fatal("CodeOf(nil) is not nil")
	}
	for _, tc := range []struct {
		err  error
		code int
	}{
		{fmt.Errorf("submit: %w", proto.ErrInvalid), ExitInvalid},
		{proto.ErrUnauthorized, ExitUnauthorized},
		{proto.ErrNotFound, ExitNotFound},
		{proto.ErrUnreachable, ExitUnreachable},
		{proto.ErrNoLeader, ExitUnreachable},
		{context.DeadlineExceeded, ExitUnreachable},
		{errors.New("run failed"), ExitRunFailed},
	} {
		var ee *ExitError
		err := CodeOf(tc.err, "give the token")
		if !errors.As(err, &ee) || ee.Code != tc.code || !errors.Is(err, tc.err) {
			t.Errorf("CodeOf(%v) = %v, want exit %d wrapping it", tc.err, err, tc.code)
		}
	}
	if err := CodeOf(proto.ErrUnauthorized, "give the token"); !strings.HasSuffix(err.Error(), "\n  give the token") {
		t.Errorf("unauthorised without its hint: %q", err)
	}
	if WithCode(ExitInvalid, nil) != nil {
		t.Error("WithCode(code, nil) is not nil")
	}
}
