package readiness

import (
	"reflect"
	"testing"
)

// The pod template's command line reads back as the options it was made of.
func TestTheCommandLineReadsBackAsItsOptions(t *testing.T) {
	for _, o := range []Options{
		{ServerPort: 6379},
		{Cluster: true, ServerPort: 6379, User: "operator"},
		{Cluster: true, ServerPort: 6379, Socket: "/data/valkey.sock", User: "operator"},
		{Replicated: true, ServerPort: 6379},
	} {
		command := o.Command()
		got, err := ParseArgs(command[1:])
		if command[0] != Program || err != nil || !reflect.DeepEqual(got, o) {
			t.Errorf("%q reads back as %+v (%v), want %+v", command, got, err, o)
		}
	}
	if _, err := ParseArgs([]string{"--cluster", "extra"}); err == nil {
		t.Error("an unexpected argument was accepted")
	}
}
