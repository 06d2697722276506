//go:build integration

package resources

import (
	"crypto/tls"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// tlsNode starts a Cluster node of cache on ip with the TLS arguments the pods get and the
// certificates of data, in a directory standing for the TLS volume, which it returns.
func tlsNode(t *testing.T, cache *cachev2.Cache, ip string, data map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	writeTLSVolume(t, dir, data)
	var c corev1.Container
	servingTLS(&c, cache)
	args := slices.Concat(listening(cache), []string{"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(BusPort),
		"--cluster-node-timeout", "1000"}, c.Args, []string{"--unixsocket", filepath.Join(dir, socketFile)})
	for i, arg := range args {
		args[i] = strings.Replace(arg, TLSPath, dir, 1)
	}
	testenv.StartValkey(t, ip, Port, args...)
	return dir
}

// writeTLSVolume writes the files the pods mount from the TLS Secret's data.
func writeTLSVolume(t *testing.T, dir string, data map[string][]byte) {
	t.Helper()
	for _, item := range tlsVolumeSource(testCache()).Secret.Items {
		if err := os.WriteFile(filepath.Join(dir, item.Path), data[item.Key], 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// On real servers: nodes with a Cache's certificates serve TLS only, to a client that trusts
// the Cache's CA and shows no certificate of its own, and form a cluster over a TLS bus; a node
// whose certificate comes from another CA cannot join it, though it MEETs a member; a key
// MIGRATEs from one member to the other over TLS; and a
// renewed certificate, once its files change, is served after ReloadCertificates by the same
// process.
func TestTLSNodesRefuseStrangersAndServeARenewedCertificateWithoutARestart(t *testing.T) {
	ctx := t.Context()
	ips := testenv.LoopbackIPs(15)[12:]
	cache, stranger := tlsCache(3*time.Hour), tlsCache(3*time.Hour)
	cache.Spec.Mode, stranger.Spec.Mode = cachev2.ModeCluster, cachev2.ModeCluster
	stranger.Name = "stranger"
	now := time.Now()
	issued, _ := next(t, cache, nil, Certificates{}, now)
	strangers, _ := next(t, stranger, nil, Certificates{}, now)
	data, strangerData := issued.TLS, strangers.TLS
	dir := tlsNode(t, cache, ips[0], data)
	tlsNode(t, cache, ips[1], data)
	tlsNode(t, stranger, ips[2], strangerData)

	if plain, err := valkey.Connect(ips[0], Port, valkey.Auth{}); err == nil {
		_, err = plain.ClusterState(ctx)
		plain.Close()
		if err == nil {
			t.Error("a client in plain text was served")
		}
	}
	servers := make([]*valkey.Server, len(ips))
	for i, ip := range ips {
		c, d := cache, data
		if i == 2 {
			c, d = stranger, strangerData
		}
		config, err := TLSClientConfig(c, d[TLSCAKey])
		if err != nil {
			t.Fatal(err)
		}
		if servers[i], err = valkey.Connect(ip, Port, valkey.Auth{TLS: config}); err != nil {
			t.Fatal(err)
		}
		defer servers[i].Close()
	}
	if err := servers[0].Meet(ctx, ips[1], Port); err != nil {
		t.Fatal(err)
	}
	if err := servers[2].Meet(ctx, ips[0], Port); err != nil {
		t.Fatal(err)
	}
	views := func() ([]map[string]valkey.ClusterNode, error) {
		var views []map[string]valkey.ClusterNode
		for _, s := range servers {
			nodes, err := s.ClusterNodes(ctx)
			if err != nil {
				return nil, err
			}
			byIP := map[string]valkey.ClusterNode{}
			for _, n := range nodes {
				if !n.Myself {
					byIP[n.IP] = n
				}
			}
			views = append(views, byIP)
		}
		return views, nil
	}
	// The members see each other connected, and the stranger's handshake with the first ends
	// (after the node timeout) without the first having learnt of it.
	testenv.WaitFor(t, 30*time.Second, "the members to meet and the stranger's handshake to end", func() (bool, string) {
		seen, err := views()
		if err != nil {
			return false, err.Error()
		}
		_, strangerTries := seen[2][ips[0]]
		return seen[0][ips[1]].Connected && seen[1][ips[0]].Connected && !strangerTries, fmt.Sprintf("%+v", seen)
	})
	if seen, err := views(); err != nil || len(seen[0]) != 1 || len(seen[1]) != 1 {
		t.Errorf("the members see %+v (%v), want each other only", seen, err)
	}

	// A key moves from one member to the other over TLS (MIGRATE, node to node), as the
	// operator moves slots.
	client := testenv.ValkeyOverTLS(t, ips[0], Port, servers[0].Auth().TLS)
	ids := make([]string, 2)
	for i := range ids {
		nodes, err := servers[i].ClusterNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		self, _ := valkey.Myself(nodes)
		ids[i] = self.ID
	}
	if err := servers[0].AddSlots(ctx, []valkey.SlotRange{{Start: 0, End: valkey.SlotCount - 1}}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "both members to see every slot served", func() (bool, string) {
		for _, s := range servers[:2] {
			if state, err := s.ClusterState(ctx); state != "ok" {
				return false, fmt.Sprint(s.Addr, " ", state, err)
			}
		}
		return true, ""
	})
	if err := client.Do(ctx, client.B().Set().Key("moving").Value("over TLS").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	slot, err := client.Do(ctx, client.B().ClusterKeyslot().Key("moving").Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if err := servers[1].SetSlotsImporting(ctx, []int{int(slot)}, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := servers[0].SetSlotsMigrating(ctx, []int{int(slot)}, ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := servers[0].MigrateKeys(ctx, ips[1], Port, []string{"moving"}); err != nil {
		t.Fatalf("MIGRATE over TLS: %v", err)
	}
	if keys, err := servers[1].KeysInSlot(ctx, int(slot), 10); err != nil || len(keys) != 1 || keys[0] != "moving" {
		t.Errorf("after MIGRATE the target holds %q in the slot (%v), want the key", keys, err)
	}

	runID := testenv.ValkeyInfo(t, client, "server", "run_id")
	served := func() string {
		cert, err := valkey.ServedCertificate(ctx, ips[0], Port, servers[0].Auth().TLS)
		if err != nil {
			t.Fatal(err)
		}
		return cert.SerialNumber.String()
	}
	first := served()
	// A certificate taken out of the Secret is issued anew, as one due for renewal is.
	withoutCert := maps.Clone(data)
	delete(withoutCert, TLSCertKey)
	renewedCerts, _ := next(t, cache, nil, Certificates{TLS: withoutCert, CA: issued.CA}, now)
	renewed := renewedCerts.TLS
	writeTLSVolume(t, dir, renewed)
	if got := served(); got != first {
		t.Fatalf("the server served serial %s before it was told to read its files again, want %s", got, first)
	}
	if err := servers[0].ReloadCertificates(ctx); err != nil {
		t.Fatal(err)
	}
	cert, err := LeafCertificate(renewed)
	if err != nil {
		t.Fatal(err)
	}
	if got := served(); got != cert.SerialNumber.String() || got == first {
		t.Errorf("after the reload the server serves serial %s, want the renewed %s", got, cert.SerialNumber)
	}
	if got := testenv.ValkeyInfo(t, client, "server", "run_id"); got != runID {
		t.Errorf("the server restarted: run_id %s, was %s", got, runID)
	}
}

// On real servers, a CA replaced in the three steps of NextCertificates: at no step does a node
// show, to a client or on the cluster bus, a certificate that another node or the operator does
// not trust, whichever of the nodes has read its files again and whichever not; a node refuses
// the probe of the new CA until it has read the files that give it that CA, and accepts it then;
// and the two stay one cluster throughout, with no restart.
func TestACAReplacedStepByStepIsNeverRefusedByANode(t *testing.T) {
	ctx := t.Context()
	ips := testenv.LoopbackIPs(17)[15:]
	cache := tlsCache(3 * time.Hour)
	cache.Spec.Mode = cachev2.ModeCluster
	now := time.Now()
	old, _ := next(t, cache, nil, Certificates{}, now)
	dirs := []string{tlsNode(t, cache, ips[0], old.TLS), tlsNode(t, cache, ips[1], old.TLS)}
	servers := make([]*valkey.Server, len(ips))
	operatorTrust := func(data map[string][]byte) valkey.Auth {
		config, err := TLSClientConfig(cache, data[TLSCAKey])
		if err != nil {
			t.Fatal(err)
		}
		return valkey.Auth{TLS: config}
	}
	for i, ip := range ips {
		var err error
		if servers[i], err = valkey.Connect(ip, Port, operatorTrust(old.TLS)); err != nil {
			t.Fatal(err)
		}
		defer servers[i].Close()
	}
	if err := servers[0].Meet(ctx, ips[1], Port); err != nil {
		t.Fatal(err)
	}
	runIDs := make([]string, len(ips))
	for i, ip := range ips {
		runIDs[i] = testenv.ValkeyInfo(t, testenv.ValkeyOverTLS(t, ip, Port, servers[i].Auth().TLS), "server", "run_id")
	}
	// files are what each node's volume holds, read are what each node read last.
	files, read := []map[string][]byte{old.TLS, old.TLS}, []map[string][]byte{old.TLS, old.TLS}
	reload := func(i int, data map[string][]byte) {
		t.Helper()
		writeTLSVolume(t, dirs[i], data)
		files[i] = data
		if err := servers[i].ReloadCertificates(ctx); err != nil {
			t.Fatal(err)
		}
		read[i] = data
	}
	// everyoneTrusts checks that each node accepts, as a client's certificate, the one the other
	// shows (as it does on the bus), and that the operator, trusting what the Secret gives,
	// accepts the certificate each node serves.
	everyoneTrusts := func(when string, secret map[string][]byte) {
		t.Helper()
		for i := range ips {
			shown, err := tls.X509KeyPair(read[i][TLSCertKey], read[i][TLSKeyKey])
			if err != nil {
				t.Fatal(err)
			}
			for j := range ips {
				config := operatorTrust(secret).TLS.Clone()
				config.Certificates = []tls.Certificate{shown}
				if err := valkey.AcceptsClientCertificate(ctx, ips[j], Port, config); i != j && err != nil {
					t.Errorf("%s: node %d refuses node %d's certificate: %v", when, j, i, err)
				}
			}
		}
	}
	step := func(held Certificates, nodes NodesReport) Certificates { return stepAt(t, cache, held, nodes, now) }
	probed := func(i int, probe *tls.Certificate, secret map[string][]byte) error {
		config := operatorTrust(secret).TLS.Clone()
		config.Certificates = []tls.Certificate{*probe}
		return valkey.AcceptsClientCertificate(ctx, ips[i], Port, config)
	}

	// A new CA, given beside the old: node 0 reads it first, node 1 later.
	a := step(Certificates{TLS: old.TLS}, NodesReport{})
	if err := probed(0, a.Probe, a.TLS); err == nil {
		t.Error("node 0 accepted the new CA's probe before it was given the CA")
	}
	reload(0, a.TLS)
	if err := probed(0, a.Probe, a.TLS); err != nil {
		t.Errorf("node 0 refuses the new CA's probe once given the CA: %v", err)
	}
	if err := probed(1, a.Probe, a.TLS); err == nil {
		t.Error("node 1 accepted the new CA's probe before it read its files again")
	}
	everyoneTrusts("the new CA read by one node", a.TLS)
	reload(1, a.TLS)
	everyoneTrusts("the new CA read by both", a.TLS)

	// The new CA's certificate: node 1 reads it first.
	b := step(Certificates{TLS: a.TLS, CA: a.CA}, NodesReport{TrustCA: true})
	reload(1, b.TLS)
	everyoneTrusts("the new certificate read by one node", b.TLS)
	reload(0, b.TLS)
	everyoneTrusts("the new certificate read by both", b.TLS)

	// The old CA goes.
	c := step(Certificates{TLS: b.TLS, CA: b.CA}, NodesReport{ServedSerial: serial(t, b.TLS)})
	reload(0, c.TLS)
	everyoneTrusts("the old CA gone from one node", c.TLS)
	reload(1, c.TLS)
	everyoneTrusts("the old CA gone from both", c.TLS)

	testenv.WaitFor(t, 30*time.Second, "the two nodes to see each other connected on the bus", func() (bool, string) {
		for i, s := range servers {
			nodes, err := s.ClusterNodes(ctx)
			if err != nil {
				return false, err.Error()
			}
			for _, n := range nodes {
				if !n.Myself && (n.IP != ips[1-i] || !n.Connected) {
					return false, fmt.Sprintf("node %d sees %+v", i, n)
				}
			}
		}
		return true, ""
	})
	for i, ip := range ips {
		if got := testenv.ValkeyInfo(t, testenv.ValkeyOverTLS(t, ip, Port, operatorTrust(c.TLS).TLS), "server", "run_id"); got != runIDs[i] {
			t.Errorf("node %d restarted", i)
		}
	}
}
