package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	valkeyadmin "example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/realnode"
	"example.com/cache-operator/test/harness/releases"
)

// reachable are the only networks tests may send traffic to: loopback, and the local clusters'
// pod and Service addresses, which never leave the machine.
var reachable = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix(realnode.Range)}

// Reachable reports whether a test may talk to the server at ip: one of its own on loopback, or
// a local cluster's pod.
func Reachable(ip string) bool {
	addr, err := netip.ParseAddr(ip)
	return err == nil && slices.ContainsFunc(reachable, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// LoopbackIPs are n (at most 254) addresses of the loopback interface for a test's own servers:
// outside the local cluster's pod range (127.64.0.0/16), and taken from the process ID, so that
// test packages running at once use different ones (unless their IDs agree in the low 14 bits).
func LoopbackIPs(n int) []string {
	if n > 254 {
		panic("LoopbackIPs: at most 254 addresses")
	}
	pid := os.Getpid()
	ips := make([]string, n)
	for i := range ips {
		ips[i] = fmt.Sprintf("127.%d.%d.%d", 65+(pid>>8)%64, pid&0xff, i+1)
	}
	return ips
}

// StartValkey starts the toolchain's valkey-server (its default release, the newest) on ip:port
// with the given extra arguments, in a data directory of its own, and waits until it accepts
// connections. It returns the server's process, for a test to signal. The server is killed when
// the test ends.
func StartValkey(t testing.TB, ip string, port int, args ...string) *os.Process {
	t.Helper()
	return startValkey(t, filepath.Join(BinDir(), "valkey-server"), ip, port, args...)
}

// StartValkeyRelease is StartValkey with the valkey-server of the release given.
func StartValkeyRelease(t testing.TB, release releases.Valkey, ip string, port int, args ...string) *os.Process {
	t.Helper()
	return startValkey(t, release.Server(), ip, port, args...)
}

// ValkeyReleases are the toolchain's Valkey releases, oldest first.
func ValkeyReleases(t testing.TB) []releases.Valkey {
	t.Helper()
	all, err := releases.Valkeys(BinDir())
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func startValkey(t testing.TB, server, ip string, port int, args ...string) *os.Process {
	t.Helper()
	dir := t.TempDir()
	args = append([]string{"--bind", ip, "--bind-source-addr", ip, "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no"}, args...)
	return startListening(t, dir, net.JoinHostPort(ip, strconv.Itoa(port)), server, args...)
}

// startListening starts the program (a path, or the name of one of the toolchain's) in dir, with
// its output in a log there, and waits until it accepts connections on addr; a program that exits
// first fails the test with its log. It is killed when the test ends.
func startListening(t testing.TB, dir, addr, program string, args ...string) *os.Process {
	t.Helper()
	if !filepath.IsAbs(program) {
		program = filepath.Join(BinDir(), program)
	}
	name := filepath.Base(program)
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(program, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = log.Close(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	WaitFor(t, 30*time.Second, name+" on "+addr+" to accept connections", func() (bool, string) {
		select {
		case <-exited:
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("%s on %s exited:\n%s", name, addr, b)
		default:
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		_ = conn.Close()
		return true, ""
	})
	return cmd.Process
}

// Valkey connects to the Valkey server at ip:port, which must be on the loopback interface or a
// local cluster's pod: nothing a test starts may send traffic anywhere else. The connection is closed when the test
// ends.
func Valkey(t testing.TB, ip string, port int) valkey.Client {
	t.Helper()
	return ValkeyOverTLS(t, ip, port, nil)
}

// ValkeyOverTLS is Valkey speaking TLS as config says; nil config, plain text.
func ValkeyOverTLS(t testing.TB, ip string, port int, config *tls.Config) valkey.Client {
	t.Helper()
	if !Reachable(ip) {
		t.Fatalf("refusing to connect to %s: tests only talk to servers in %v", ip, reachable)
	}
	client, err := valkey.NewClient(valkey.ClientOption{
		InitAddress: []string{net.JoinHostPort(ip, fmt.Sprint(port))},
		// One server, no client-side cache: what is asked is what the server answers.
		ForceSingleClient: true,
		DisableCache:      true,
		Dialer:            net.Dialer{Timeout: 5 * time.Second},
		ConnWriteTimeout:  5 * time.Second,
		TLSConfig:         config,
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
	value := valkeyadmin.InfoField(info, field)
	if value == "" {
		t.Fatalf("INFO %s has no %s:\n%s", section, field, info)
	}
	return value
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

// SetAcknowledgedByAReplica writes each key with its value on the server c is connected to (a
// primary, or one node of a cluster client dedicated to the keys' slot) and waits until a replica
// has acknowledged them all (WAIT 1): writes that a failover must not lose.
func SetAcknowledgedByAReplica(t testing.TB, c valkey.Client, keys, values []string) {
	t.Helper()
	err := c.Dedicated(func(d valkey.DedicatedClient) error {
		cmds := make(valkey.Commands, 0, len(keys)+1)
		for i, key := range keys {
			cmds = append(cmds, d.B().Set().Key(key).Value(values[i]).Build())
		}
		cmds = append(cmds, d.B().Wait().Numreplicas(1).Timeout(5000).Build())
		replies := d.DoMulti(context.Background(), cmds...)
		for _, r := range replies[:len(replies)-1] {
			if err := r.Error(); err != nil {
				return err
			}
		}
		if acked, err := replies[len(replies)-1].AsInt64(); err != nil || acked < 1 {
			return fmt.Errorf("WAIT 1: %d replicas acknowledged: %w", acked, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// StartClusterNodes starts a Cluster node (valkey-server --cluster-enabled yes, with the
// arguments given) at port 6379 of each of ips, and returns a connection to each as auth says
// and each node's ID. The nodes know of no other yet.
func StartClusterNodes(t testing.TB, ips []string, auth valkeyadmin.Auth, args func(i int) []string) ([]*valkeyadmin.Server, []string) {
	t.Helper()
	servers := make([]*valkeyadmin.Server, len(ips))
	ids := make([]string, len(ips))
	for i, ip := range ips {
		servers[i], ids[i], _ = StartClusterNode(t, ip, auth, args(i)...)
	}
	return servers, ids
}

// StartClusterNode starts a Cluster node at port 6379 of ip, as StartClusterNodes does, and also
// returns its process, for a test to signal.
func StartClusterNode(t testing.TB, ip string, auth valkeyadmin.Auth, args ...string) (*valkeyadmin.Server, string, *os.Process) {
	t.Helper()
	process := StartValkey(t, ip, 6379, append([]string{"--cluster-enabled", "yes"}, args...)...)
	s, err := valkeyadmin.Connect(ip, 6379, auth)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	nodes, err := s.ClusterNodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	self, _ := valkeyadmin.Myself(nodes)
	return s, self.ID, process
}

// WaitStopped waits until the process is stopped (SIGSTOP): kill(2) returns before the signal
// takes the process off the CPU, and on a busy machine it may still answer a request first.
func WaitStopped(t testing.TB, process *os.Process) {
	t.Helper()
	WaitFor(t, 10*time.Second, fmt.Sprintf("process %d stopped", process.Pid), func() (bool, string) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", process.Pid))
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		return err == nil && len(fields) > 0 && fields[0] == "T", fmt.Sprint(fields, err)
	})
}
