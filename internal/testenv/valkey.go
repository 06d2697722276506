package testenv

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

// loopback is the only network tests may send traffic to.
var loopback = &net.IPNet{IP: net.IPv4(127, 0, 0, 0), Mask: net.CIDRMask(8, 32)}

// LoopbackIP is an address of the loopback interface for a test's own servers, outside the
// local cluster's pod range and different for each test process, so that concurrent test
// packages never collide.
func LoopbackIP() string {
	pid := os.Getpid()
	return fmt.Sprintf("127.65.%d.%d", pid>>8&0xff, pid&0xff|1)
}

// Valkey connects to the Valkey server at ip:port, which must be on the loopback interface:
// nothing a test starts may send traffic anywhere else. The connection is closed when the test
// ends.
func Valkey(t testing.TB, ip string, port int) valkey.Client {
	t.Helper()
	if addr := net.ParseIP(ip); addr == nil || !loopback.Contains(addr) {
		t.Fatalf("refusing to connect to %s: tests only talk to servers on 127.0.0.0/8", ip)
	}
	client, err := valkey.NewClient(valkey.ClientOption{
		InitAddress: []string{net.JoinHostPort(ip, fmt.Sprint(port))},
		// One server, no client-side cache: what is asked is what the server answers.
		ForceSingleClient: true,
		DisableCache:      true,
		Dialer:            net.Dialer{Timeout: 5 * time.Second},
		ConnWriteTimeout:  5 * time.Second,
	})
	if err != nil {
		t.Fatalf("connecting to Valkey at %s: %v", ip, err)
	}
	t.Cleanup(client.Close)
	return client
}

// ValkeyInfo is one field of a section of the server's INFO, such as ("server", "run_id").
func ValkeyInfo(t testing.TB, client valkey.Client, section, field string) string {
	t.Helper()
	info, err := client.Do(context.Background(), client.B().Info().Section(section).Build()).ToString()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	lines := bufio.NewScanner(strings.NewReader(info))
	for lines.Scan() {
		if value, ok := strings.CutPrefix(strings.TrimSpace(lines.Text()), field+":"); ok {
			return value
		}
	}
	t.Fatalf("INFO %s has no %s:\n%s", section, field, info)
	return ""
}

// ValkeyConfig is the value of one configuration parameter of the server.
func ValkeyConfig(t testing.TB, client valkey.Client, parameter string) string {
	t.Helper()
	values, err := client.Do(context.Background(), client.B().ConfigGet().Parameter(parameter).Build()).AsStrMap()
	if err != nil {
		t.Fatalf("CONFIG GET %s: %v", parameter, err)
	}
	return values[parameter]
}
