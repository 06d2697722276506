package realnode

import (
	"strings"
	"syscall"
	"testing"
)

// An inotify instance the process opens is counted, and one it closes is not.
func TestInotifyInstancesAreCounted(t *testing.T) {
	before := inotifyInstancesIn("/proc/self")
	fd, err := syscall.InotifyInit()
	if err != nil {
		t.Fatal(err)
	}
	if got := inotifyInstancesIn("/proc/self"); got != before+1 {
		t.Errorf("with one more instance open, %d counted; want %d", got, before+1)
	}
	if err := syscall.Close(fd); err != nil {
		t.Fatal(err)
	}
	if got := inotifyInstancesIn("/proc/self"); got != before {
		t.Errorf("with it closed, %d counted; want %d", got, before)
	}
}

// More nodes than any machine's limit leaves room for are refused, with why.
func TestNodesBeyondTheInotifyLimitAreRefused(t *testing.T) {
	err := CheckInotifyRoom(1 << 20)
	if err == nil || !strings.Contains(err.Error(), maxUserInstances) {
		t.Errorf("a million nodes: %v, want an error naming %s", err, maxUserInstances)
	}
	if err := CheckInotifyRoom(0); err != nil {
		t.Errorf("no node: %v", err)
	}
}
