package cli

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// HealthCmd is the health subcommand of the coordinator and of every node
// binary, for container health checks: exit 0 when what's /healthz at
// --server (default dflt) answers 200, 1 when it answers otherwise, 3 when
// nothing answers. trust, when set, adjusts the HTTP client to the flags it
// adds (the coordinator's --ca-file).
func HealthCmd(what, dflt string, trust func(cmd *cobra.Command) func(*http.Client) error) *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "health --server " + dflt,
		Short: "exit 0 when the " + what + " at --server answers /healthz (for container health checks)",
		Args:  cobra.NoArgs,
	}
	var adjust func(*http.Client) error
	if trust != nil {
		adjust = trust(cmd)
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		hc := &http.Client{Timeout: 2 * time.Second}
		if adjust != nil {
			if err := adjust(hc); err != nil {
				return err
			}
		}
		resp, err := hc.Get(strings.TrimSuffix(url, "/") + "/healthz")
		if err != nil {
			return WithCode(ExitUnreachable, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return WithCode(ExitRunFailed, fmt.Errorf("healthz: %s", resp.Status))
		}
		return nil
	}
	cmd.Flags().StringVar(&url, "server", dflt, what+" HTTP address")
	cmd.Flags().StringVar(&url, "url", dflt, "the same as --server")
	_ = cmd.Flags().MarkHidden("url")
	return cmd
}
