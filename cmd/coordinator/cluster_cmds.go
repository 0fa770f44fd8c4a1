package main

import "github.com/spf13/cobra"

// addClusterCommands adds the commands that talk to a cluster (filled in as
// the coordinator lands).
func addClusterCommands(root *cobra.Command) {}
