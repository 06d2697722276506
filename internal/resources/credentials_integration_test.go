//go:build integration

package resources

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// The exporter's user reads what the server reports and nothing that shows a key, a value or a
// setting: not masterauth, the replication user's password (whose user may SYNC the whole
// dataset), not a key, not the slow log's commands with their arguments. A server that started
// with an earlier release's rights, which let the exporter read masterauth, gets the new ones from
// the operator (valkey.SetUsers), an exporter's session opened before included. On a real server.
func TestTheExportersUserReadsNoKeyAndNoSecret(t *testing.T) {
	ip := testenv.LoopbackIPs(13)[12]
	cache := testCache()
	cache.Spec.Auth = &cachev2.Auth{}
	acl, _ := NextACL(cache, ACL{}, "the-application-password", time.Now())
	earlier := strings.Replace(acl.File(cache), userRules[ExporterUser],
		"+info +ping +config|get +client|list +client|setname +slowlog +latency +cluster|info +cluster|slots +select +dbsize +memory|usage +latency|histogram", 1)
	file := filepath.Join(t.TempDir(), ACLFileKey)
	if err := os.WriteFile(file, []byte(earlier), 0o600); err != nil {
		t.Fatal(err)
	}
	const masterauth = "the-replication-password"
	testenv.StartValkey(t, ip, Port, "--aclfile", file, "--masteruser", ReplicationUser, "--masterauth", masterauth)
	connect := func(user, password string) valkeygo.Client {
		c, err := valkeygo.NewClient(valkeygo.ClientOption{
			InitAddress: []string{net.JoinHostPort(ip, strconv.Itoa(Port))}, Username: user, Password: password,
			ForceSingleClient: true, DisableCache: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	app, exporter := connect(cachev2.AppUser, "the-application-password"), connect(ExporterUser, acl.Passwords[ExporterUser])
	if err := app.Do(t.Context(), app.B().Set().Key("a-key").Value("a-value").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got, err := exporter.Do(t.Context(), exporter.B().ConfigGet().Parameter("masterauth").Build()).AsStrMap(); err != nil || got["masterauth"] != masterauth {
		t.Fatalf("with the earlier rights the exporter reads masterauth as %q (%v): the test does not start where it should", got["masterauth"], err)
	}

	server, err := valkey.Connect(ip, Port, valkey.Auth{User: OperatorUser, Password: acl.Passwords[OperatorUser]})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if err := server.SetUsers(t.Context(), acl.Users(cache)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd     []string
		allowed bool
	}{
		{[]string{"INFO", "ALL"}, true},
		{[]string{"PING"}, true},
		{[]string{"SLOWLOG", "LEN"}, true},
		{[]string{"LATENCY", "LATEST"}, true},
		{[]string{"DBSIZE"}, true},
		{[]string{"CONFIG", "GET", "masterauth"}, false},
		{[]string{"GET", "a-key"}, false},
		{[]string{"SCAN", "0"}, false},
		{[]string{"SLOWLOG", "GET", "1"}, false},
		{[]string{"CLIENT", "LIST"}, false},
		{[]string{"MEMORY", "USAGE", "a-key"}, false},
	} {
		err := exporter.Do(t.Context(), exporter.B().Arbitrary(c.cmd...).Build()).Error()
		if refused := err != nil && strings.Contains(err.Error(), "NOPERM"); refused == c.allowed {
			t.Errorf("the exporter's %s: %v; want allowed %t", strings.Join(c.cmd, " "), err, c.allowed)
		}
	}
	// The application user's session keeps its rights: it still reads its key.
	if got, err := app.Do(t.Context(), app.B().Get().Key("a-key").Build()).ToString(); err != nil || got != "a-value" {
		t.Errorf("GET a-key as the application user after the new rights: %q, %v", got, err)
	}
}
