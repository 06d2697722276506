//go:build integration

package snapshot

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"

	"example.com/cache-operator/test/harness/testenv"
)

// fill writes n keys, every tenth with a TTL of an hour, into the server.
func fill(t *testing.T, c valkeygo.Client, n int) {
	t.Helper()
	cmds := make(valkeygo.Commands, 0, n)
	for i := range n {
		set := c.B().Set().Key("key-" + strconv.Itoa(i)).Value(fmt.Sprintf("value-%d", i))
		if i%10 == 0 {
			cmds = append(cmds, set.Ex(time.Hour).Build())
		} else {
			cmds = append(cmds, set.Build())
		}
	}
	for _, res := range c.DoMulti(context.Background(), cmds...) {
		if err := res.Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// A snapshot, diskless (the stream ends in a mark) or from disk (the stream says its length),
// announcing the server's own version, is an RDB that a new server of the release loads whole:
// every key, its value and its TTL; and its head says its format and its keys, on each release
// of the toolchain (RDB 11 from Valkey 8, 80 from Valkey 9).
func TestASnapshotLoadsIntoANewServerWhole(t *testing.T) {
	valkeys := testenv.ValkeyReleases(t)
	ips := testenv.LoopbackIPs(10 + 4*len(valkeys))[10:]
	for r, release := range valkeys {
		wantFormat := 11
		if release.AtLeast("9.0") {
			wantFormat = 80
		}
		for i, sync := range []string{"yes", "no"} {
			t.Run(release.Version+"/repl-diskless-sync "+sync, func(t *testing.T) {
				t.Parallel()
				ips := ips[4*r+2*i : 4*r+2*i+2]
				testenv.StartValkeyRelease(t, release, ips[0], 6379, "--repl-diskless-sync", sync, "--repl-diskless-sync-delay", "0")
				const keys = 10_000
				source := testenv.Valkey(t, ips[0], 6379)
				fill(t, source, keys)
				// A library of functions comes in the RDB before the keys.
				const library = "#!lua name=lib\nserver.register_function('one', function() return 1 end)"
				if err := source.Do(context.Background(), source.B().FunctionLoad().FunctionCode(library).Build()).Error(); err != nil {
					t.Fatal(err)
				}

				dir := t.TempDir()
				f, err := os.Create(filepath.Join(dir, "dump.rdb"))
				if err != nil {
					t.Fatal(err)
				}
				n, err := Source{Addr: net.JoinHostPort(ips[0], "6379"), Version: release.Version}.Take(context.Background(), f)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					t.Fatalf("snapshot: %d bytes, %v", n, err)
				}
				if info, _ := os.Stat(f.Name()); info.Size() != n {
					t.Errorf("the snapshot says %d bytes, the file has %d", n, info.Size())
				}

				f, err = os.Open(f.Name())
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close() //nolint:errcheck // read only
				if h, err := ReadHead(bufio.NewReader(f)); err != nil || h.Format != wantFormat || h.DB != 0 || h.Keys != keys {
					t.Errorf("the RDB's head says format %d, database %d holding %d keys (%v); want %d, 0 and %d", h.Format, h.DB, h.Keys, err, wantFormat, keys)
				}

				testenv.StartValkeyRelease(t, release, ips[1], 6379, "--dir", dir, "--dbfilename", "dump.rdb")
				restored := testenv.Valkey(t, ips[1], 6379)
				ctx := context.Background()
				if size, err := restored.Do(ctx, restored.B().Dbsize().Build()).AsInt64(); err != nil || size != keys {
					t.Fatalf("the server that loaded the snapshot holds %d keys (%v), want %d", size, err, keys)
				}
				for _, i := range []int{0, 1, 4_999, 9_990, 9_999} {
					key := "key-" + strconv.Itoa(i)
					if v, err := restored.Do(ctx, restored.B().Get().Key(key).Build()).ToString(); err != nil || v != fmt.Sprintf("value-%d", i) {
						t.Errorf("%s = %q, %v", key, v, err)
					}
					ttl, err := restored.Do(ctx, restored.B().Ttl().Key(key).Build()).AsInt64()
					if withTTL := i%10 == 0; err != nil || withTTL != (ttl > 0) {
						t.Errorf("%s has TTL %d (%v); want one: %v", key, ttl, err, withTTL)
					}
				}
			})
		}
	}
}

// A snapshot of a Valkey 9 server whose data needs its own format (a hash with a field that
// expires, new in 9.0) is whole when it announces the server's version, and fails when it
// announces none, as the server then writes the RDB 11 that cannot hold it.
func TestASnapshotOfValkey9HoldsWhatOnlyItsFormatCan(t *testing.T) {
	valkeys := testenv.ValkeyReleases(t)
	release := valkeys[len(valkeys)-1]
	if !release.AtLeast("9.0") {
		t.Skipf("the toolchain's newest Valkey is %s", release.Version)
	}
	ip := testenv.LoopbackIPs(7)[6]
	testenv.StartValkeyRelease(t, release, ip, 6379, "--repl-diskless-sync-delay", "0")
	c := testenv.Valkey(t, ip, 6379)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Arbitrary("HSETEX", "session", "EX", "3600", "FIELDS", "1", "token", "t").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	source := Source{Addr: net.JoinHostPort(ip, "6379")}
	if n, err := source.Take(ctx, io.Discard); err == nil {
		t.Errorf("a snapshot announcing no version gave %d bytes; want the server to fail the RDB 11 that cannot hold it", n)
	}
	source.Version = release.Version
	var rdb bytes.Buffer
	if n, err := source.Take(ctx, &rdb); err != nil {
		t.Fatalf("a snapshot announcing %s: %d bytes, %v", release.Version, n, err)
	}
	if h, err := ReadHead(bufio.NewReader(&rdb)); err != nil || h.Format != 80 || h.Keys != 1 {
		t.Errorf("the snapshot's head: format %d, %d keys (%v); want 80 and 1", h.Format, h.Keys, err)
	}
}

// A server that stops sending (here, stopped with SIGSTOP) fails the snapshot after the stall
// time, rather than holding it for good.
func TestASnapshotOfAServerThatStopsSendingFails(t *testing.T) {
	ip := testenv.LoopbackIPs(5)[4]
	server := testenv.StartValkey(t, ip, 6379)
	if err := server.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Signal(syscall.SIGCONT) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n, err := (Source{Addr: net.JoinHostPort(ip, "6379"), Stall: time.Second}).Take(ctx, io.Discard); err == nil || ctx.Err() != nil {
		t.Errorf("a snapshot of a stopped server gave %d bytes, %v; want its own error before the test's deadline", n, err)
	}
}

// A server with auth gives a snapshot to its user, after AUTH, and refuses one to a wrong
// password with an error that does not carry the password.
func TestASnapshotAuthenticatesAsItsUser(t *testing.T) {
	ip := testenv.LoopbackIPs(6)[5]
	testenv.StartValkey(t, ip, 6379, "--repl-diskless-sync-delay", "0", "--user", "default", "off", "--user", "operator", "on", ">right-password", "~*", "&*", "+@all")
	addr := net.JoinHostPort(ip, "6379")
	if n, err := (Source{Addr: addr, User: "operator", Password: "right-password"}).Take(context.Background(), io.Discard); err != nil || n == 0 {
		t.Errorf("a snapshot as the server's user: %d bytes, %v", n, err)
	}
	_, err := (Source{Addr: addr, User: "operator", Password: "wrong-password"}).Take(context.Background(), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") || strings.Contains(err.Error(), "wrong-password") {
		t.Errorf("a snapshot with a wrong password: %v; want WRONGPASS, without the password", err)
	}
	if _, err := (Source{Addr: addr}).Take(context.Background(), io.Discard); err == nil {
		t.Error("a snapshot without credentials was served")
	}
}
