package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/kunobi-ninja/kobe/internal/version"
)

// NewCmdVersion returns `kobe version`.
func NewCmdVersion(streams IOStreams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this kobe CLI",
		Long:  "Print the version of this kobe CLI. `kobe status` shows the server's.",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			if err := validateOutput(output); err != nil {
				return err
			}
			info := struct {
				Version   string `json:"version"`
				GoVersion string `json:"go_version"`
				Platform  string `json:"platform"`
			}{version.Version, runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH}
			if output == OutputJSON {
				return printJSON(streams.Out, info)
			}
			_, err := fmt.Fprintf(streams.Out, "kobe %s (%s, %s)\n", info.Version, info.GoVersion, info.Platform)
			return err
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}
