package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreeAddr is a loopback address with a port that was free a moment ago, for a server that a
// test starts on it. The port is taken below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): the port that listening on port 0 gives comes from that range,
// from which the kernel also gives every outgoing connection of every process here its source
// port, and a connection made between the pick and the server's start took an operator's
// metrics port once in a whole tier ("bind: address already in use"). Below the range only
// servers that chose their port themselves compete, and the pick is random among thousands.
func FreeAddr(t testing.TB) string {
	t.Helper()
	low, high := pickablePorts()
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(low+rand.IntN(high-low)))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // in use
		}
		l.Close() //nolint:errcheck
		return addr
	}
	t.Fatalf("no free port of 127.0.0.1 in [%d, %d) after 100 tries", low, high)
	return ""
}

// FreePort is the port of a free address of 127.0.0.1 (see FreeAddr).
func FreePort(t testing.TB) int {
	t.Helper()
	_, port, err := net.SplitHostPort(FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// pickablePorts is the range FreeAddr picks from: from 10000 (above the ports that well-known
// services are configured on) to the start of the ephemeral range, or Linux's default range's
// start where it cannot be read or leaves too little room below it.
func pickablePorts() (low, high int) {
	const first, defaultEphemeral, atLeast = 10000, 32768, 4096
	high = defaultEphemeral
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var start, end int
		if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &start, &end); err == nil && start-first >= atLeast {
			high = start
		}
	}
	return first, high
}
