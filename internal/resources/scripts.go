package resources

import (
	_ "embed"
	"slices"
)

// The shell scripts that a Cache's pods run are files of their own (scripts/), which make lint
// checks with shellcheck and the tests run under sh; a pod's command is a script whole, with its
// arguments (scriptCommand).
var (
	//go:embed scripts/start.sh
	startScript string
	//go:embed scripts/hand-over.sh
	handOverScript string
	//go:embed scripts/fail-over.sh
	failOverScript string
)

// scriptCommand is the command that runs script with the image's shell and args; name is what the
// script calls itself ($0).
func scriptCommand(script, name string, args ...string) []string {
	return slices.Concat([]string{"sh", "-c", script, name}, args)
}
