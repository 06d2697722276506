//go:build integration

package readiness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"example.com/cache-operator/test/harness/testenv"
)

// agentOf is an agent of the server at ip:6379, as a pod's agent is of its own server.
func agentOf(ip string, o Options, password string) *Agent {
	o.ServerPort = 6379
	a := NewAgent(o, password)
	a.host = ip
	return a
}

// probe asks the agent as the kubelet does, and returns why the server is not ready, or nil.
func probe(a *Agent) error {
	w := httptest.NewRecorder()
	a.ServeHTTP(w, httptest.NewRequest(http.MethodGet, Path, nil))
	if w.Code != http.StatusOK {
		return fmt.Errorf("%d %s", w.Code, w.Body)
	}
	return nil
}

// A Cluster node is ready as a primary that serves slots, and as a replica only once its link to
// its primary is up: a node that has joined no cluster yet, a replica whose primary does not
// answer, and a server that does not answer are not ready. On real servers.
func TestAClusterNodeIsReadyServingSlotsOrAsAReplicaInSync(t *testing.T) {
	ips := testenv.LoopbackIPs(11)[7:]
	node, primary, replica, nobody := ips[0], ips[1], ips[2], ips[3]
	testenv.StartValkey(t, node, 6379, "--cluster-enabled", "yes")
	testenv.StartValkey(t, primary, 6379, "--repl-diskless-sync-delay", "0")
	// A replica of an address where nothing listens: its link stays down.
	testenv.StartValkey(t, replica, 6379, "--replicaof", "127.0.0.1", "1")
	cluster := Options{Cluster: true}
	nodeAgent, replicaAgent := agentOf(node, cluster, ""), agentOf(replica, cluster, "")
	t.Cleanup(nodeAgent.Close)
	t.Cleanup(replicaAgent.Close)
	if err := probe(nodeAgent); err == nil {
		t.Error("a cluster node with no slot and no primary is ready")
	}
	c := testenv.Valkey(t, node, 6379)
	if err := c.Do(t.Context(), c.B().ClusterAddslotsrange().StartSlotEndSlot().StartSlotEndSlot(0, 16383).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := probe(nodeAgent); err != nil {
		t.Errorf("a primary that serves slots is not ready: %v", err)
	}
	if err := probe(replicaAgent); err == nil {
		t.Error("a replica with its link down is ready")
	}
	c = testenv.Valkey(t, replica, 6379)
	if err := c.Do(t.Context(), c.B().Replicaof().Host(primary).Port(6379).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the replica in sync to be ready", func() (bool, string) {
		err := probe(replicaAgent)
		return err == nil, fmt.Sprint(err)
	})
	if err := probe(agentOf(nobody, cluster, "")); err == nil {
		t.Error("a server that does not answer is ready")
	}
}

// A Replicated node is ready as the primary, or as a replica whose link is up; held, as every
// server starts (a replica of an address where nothing listens), it is not. On real servers.
func TestAReplicatedNodeIsReadyAsThePrimaryOrAsAReplicaInSync(t *testing.T) {
	ips := testenv.LoopbackIPs(17)[15:]
	first, second := ips[0], ips[1]
	for _, ip := range ips {
		testenv.StartValkey(t, ip, 6379, "--replicaof", "127.0.0.1", "1", "--repl-diskless-sync-delay", "0")
	}
	replicated := Options{Replicated: true}
	firstAgent, secondAgent := agentOf(first, replicated, ""), agentOf(second, replicated, "")
	t.Cleanup(firstAgent.Close)
	t.Cleanup(secondAgent.Close)
	if err := probe(firstAgent); err == nil {
		t.Error("a server given no role is ready")
	}
	c := testenv.Valkey(t, first, 6379)
	if err := c.Do(t.Context(), c.B().Replicaof().No().One().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := probe(firstAgent); err != nil {
		t.Errorf("the primary is not ready: %v", err)
	}
	c = testenv.Valkey(t, second, 6379)
	if err := c.Do(t.Context(), c.B().Replicaof().Host(first).Port(6379).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the replica in sync to be ready", func() (bool, string) {
		err := probe(secondAgent)
		return err == nil, fmt.Sprint(err)
	})
}

// A Standalone node with auth is ready once the agent is let in: a server that refuses its
// password is not ready. Through the server's Unix socket, as with TLS.
func TestAStandaloneNodeIsReadyWhenItLetsTheAgentIn(t *testing.T) {
	ip := testenv.LoopbackIPs(12)[11]
	socket := filepath.Join(t.TempDir(), "valkey.sock")
	testenv.StartValkey(t, ip, 6379, "--unixsocket", socket, "--unixsocketperm", "700",
		"--user", "default", "off", "--user", "operator", "on", ">the-password", "+@all", "~*")
	over := Options{Socket: socket, User: "operator"}
	if err := probe(agentOf(ip, over, "another-password")); err == nil {
		t.Error("a server that refuses the agent's password is ready")
	}
	a := agentOf(ip, over, "the-password")
	t.Cleanup(a.Close)
	if err := probe(a); err != nil {
		t.Errorf("a server that lets the agent in is not ready: %v", err)
	}
}

// The agent's connection outlives its server: a server restarted in place (a crash, an OOM
// kill) is ready again once it answers, without the agent restarting.
func TestTheAgentReconnectsToAServerRestartedInPlace(t *testing.T) {
	ip := testenv.LoopbackIPs(13)[12]
	server := testenv.StartValkey(t, ip, 6379)
	a := agentOf(ip, Options{}, "")
	t.Cleanup(a.Close)
	if err := probe(a); err != nil {
		t.Fatalf("the server is not ready: %v", err)
	}
	if err := server.Kill(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the killed server not to be ready", func() (bool, string) {
		err := probe(a)
		return err != nil, "ready"
	})
	testenv.StartValkey(t, ip, 6379)
	testenv.WaitFor(t, 30*time.Second, "the restarted server to be ready", func() (bool, string) {
		err := probe(a)
		return err == nil, fmt.Sprint(err)
	})
}

// A probe of a server that no longer answers (stopped here, as a hung or swapping server would
// be) is answered, not ready, within the probe's timeout, so that three of them take the pod out
// of its Service and its budget.
func TestAProbeOfAServerThatHangsIsAnsweredNotReady(t *testing.T) {
	ip := testenv.LoopbackIPs(14)[13]
	server := testenv.StartValkey(t, ip, 6379, "--cluster-enabled", "yes")
	for name, o := range map[string]Options{"a Cluster node's": {Cluster: true}, "a Standalone node's": {}} {
		t.Run(name, func(t *testing.T) {
			a := agentOf(ip, o, "")
			t.Cleanup(a.Close)
			_ = probe(a) // connected before the server stops, as an agent is
			if err := server.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			testenv.WaitStopped(t, server)
			defer func() { _ = server.Signal(syscall.SIGCONT) }()
			answered := make(chan error, 1)
			go func() { answered <- probe(a) }()
			select {
			case err := <-answered:
				if err == nil {
					t.Error("a stopped server is ready")
				}
			case <-time.After(CheckTimeout + time.Second):
				t.Fatal("the probe of a stopped server was not answered within the probe's timeout")
			}
		})
	}
}

// Once the pod stops, the agent answers probes for as long as its server serves (a primary
// hands its shard over first), and exits once the server is gone.
func TestTheAgentOutlivesItsServerOnlyBriefly(t *testing.T) {
	ip := testenv.LoopbackIPs(15)[14]
	server := testenv.StartValkey(t, ip, 6379)
	listener, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- agentOf(ip, Options{}, "").Serve(ctx, listener) }()
	get := func() error {
		resp, err := http.Get("http://" + listener.Addr().String() + Path)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	}
	stop()
	if err := get(); err != nil {
		t.Errorf("a stopping agent whose server serves does not answer ready: %v", err)
	}
	select {
	case err := <-served:
		t.Fatalf("the agent exited while its server served: %v", err)
	default:
	}
	if err := server.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("the agent ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not exit once its server was gone")
	}
}
