// Package readiness is the readiness agent (cmd/readiness, a program of the operator's image): a
// small agent, run as a container beside each Valkey server of a Cache, that answers the kubelet's
// HTTP readiness probe with what its server reports. It keeps one connection to the server,
// through the pod's own network or its Unix socket, and asks it on each probe. Connecting is
// bounded as every connection of package valkey is (valkey.Timeout to dial, as much to
// authenticate), so a check that must connect first still ends about when CheckTimeout does.
//
// Why an agent rather than an exec probe: an exec probe starts runc, a shell and valkey-cli (twice
// on a Cluster primary) inside the container at every period, and each start costs tens of
// milliseconds of CPU. On a node of many cache pods that adds up: in the e2e tier on two cores it
// was the largest consumer of all, 920 of 3,988 core-seconds, more than the API server. The
// kubelet runs an HTTP probe itself, with no process started.
package readiness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"example.com/cache-operator/internal/valkey"
)

const (
	// Program is where the operator's image holds the agent (cmd/readiness): a program of its
	// own rather than a mode of the operator's, since it runs in every cache pod, and the
	// operator's program takes 56 MB of memory before it does anything, the agent 9 MB.
	Program = "/cache-operator-readiness"
	// Port is where the agent serves Path, on every address of the pod.
	Port = 8079
	// Path answers 200 while the server is ready, and 503 with the reason while it is not.
	Path = "/ready"
	// EnvPassword holds the password the agent authenticates with, when the server has auth.
	EnvPassword = "VALKEY_PASSWORD"
	// CheckTimeout bounds one check, connecting included: the probe's own timeout is a second
	// more, so that a server that hangs is reported as not ready rather than a probe timed out.
	CheckTimeout = 4 * time.Second
	// goneAfterStop is how often, once the pod is stopping, the agent checks whether its server
	// is gone: it answers probes as long as the server lives (a Cluster primary hands its shard
	// over in its preStop hook first), and then exits rather than hold the pod up.
	goneAfterStop = 500 * time.Millisecond

	logPrefix = "readiness:"
)

// Options is how the agent reaches its server, and which rule makes it ready.
type Options struct {
	// Cluster: the server is a Cluster node, ready as ClusterNodeReady says; Replicated: a
	// Replicated Cache's node, ready as ReplicatedNodeReady says; otherwise it is ready when it
	// answers.
	Cluster, Replicated bool
	// Socket is the server's Unix socket; empty, the agent connects to 127.0.0.1:ServerPort.
	Socket     string
	ServerPort int
	// User, with the password in EnvPassword, is who the agent authenticates as ("" for none).
	User string
}

// Command is the agent's command line for these options: the pod template's side of ParseArgs.
func (o Options) Command() []string {
	args := []string{Program, "--server-port", strconv.Itoa(o.ServerPort)}
	if o.Cluster {
		args = append(args, "--cluster")
	}
	if o.Replicated {
		args = append(args, "--replicated")
	}
	if o.Socket != "" {
		args = append(args, "--socket", o.Socket)
	}
	if o.User != "" {
		args = append(args, "--user", o.User)
	}
	return args
}

// ParseArgs reads the options from the agent's arguments.
func ParseArgs(args []string) (Options, error) {
	var o Options
	flags := flag.NewFlagSet(Program, flag.ContinueOnError)
	flags.BoolVar(&o.Cluster, "cluster", false, "The server is a Valkey Cluster node.")
	flags.BoolVar(&o.Replicated, "replicated", false, "The server is a node of a Replicated Cache.")
	flags.StringVar(&o.Socket, "socket", "", "The server's Unix socket; empty: TCP to 127.0.0.1.")
	flags.IntVar(&o.ServerPort, "server-port", 6379, "The server's port, without --socket.")
	flags.StringVar(&o.User, "user", "", "The user to authenticate as, with the password in $"+EnvPassword+".")
	if err := flags.Parse(args); err != nil {
		return Options{}, err
	}
	if flags.NArg() > 0 {
		return Options{}, fmt.Errorf("unexpected arguments: %q", flags.Args())
	}
	return o, nil
}

// Run serves Path on Port until ctx is done and the server is gone; it returns the exit code.
func Run(ctx context.Context, args []string) int {
	o, err := ParseArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, logPrefix, err)
		return 2
	}
	listener, err := net.Listen("tcp", ":"+strconv.Itoa(Port))
	if err == nil {
		err = NewAgent(o, os.Getenv(EnvPassword)).Serve(ctx, listener)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, logPrefix, err)
		return 1
	}
	return 0
}

// Agent answers readiness probes of one server.
type Agent struct {
	options  Options
	password string
	// host is where the server is, without a socket: the pod's own loopback address.
	host string

	mu     sync.Mutex
	server *valkey.Server
	// last is the last check's answer, logged when it changes, and given to a request that comes
	// while a check runs.
	last atomic.Pointer[answer]
}

// answer is what a check found: why the server is not ready, or nil.
type answer struct{ notReady error }

// String is the answer as the agent logs it.
func (a *answer) String() string {
	if a.notReady == nil {
		return "ready"
	}
	return "not ready: " + a.notReady.Error()
}

// NewAgent is the agent of the server that the options say, with the password given.
func NewAgent(o Options, password string) *Agent {
	return &Agent{options: o, password: password, host: "127.0.0.1"}
}

// Serve answers probes on listener until ctx is done and then the server is gone: a pod that
// stops stops all its containers at once, and the server may go on serving for a while (a
// Cluster primary hands its shard over in its preStop hook first); the agent answers as long as
// it does, and then exits rather than hold the pod up.
func (a *Agent) Serve(ctx context.Context, listener net.Listener) error {
	defer a.Close()
	srv := &http.Server{Handler: a, ReadHeaderTimeout: CheckTimeout}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(listener) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	if err := a.waitServerGone(served); err != nil {
		return err
	}
	return srv.Close()
}

// ServeHTTP answers a probe: 200 if the server is ready, 503 and why if not.
func (a *Agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), CheckTimeout)
	defer cancel()
	err := a.Check(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}

// Check reports why the server is not ready, or nil. It logs each change of its answer. While
// another check runs, it answers as the last one did rather than queue behind it: the agent's
// port is open to the pod's network, and requests that each waited on a server that hangs would
// pile up against the container's memory limit.
func (a *Agent) Check(ctx context.Context) error {
	if !a.mu.TryLock() {
		return a.lastAnswer()
	}
	defer a.mu.Unlock()
	now := &answer{a.check(ctx)}
	if before := a.last.Swap(now); before == nil || before.String() != now.String() {
		fmt.Fprintln(os.Stderr, logPrefix, now)
	}
	return now.notReady
}

// lastAnswer is the answer of the last check, or not ready if none has ended yet.
func (a *Agent) lastAnswer() error {
	if last := a.last.Load(); last != nil {
		return last.notReady
	}
	return errors.New("not checked yet")
}

func (a *Agent) check(ctx context.Context) error {
	if a.server == nil {
		s, err := a.connect()
		if err != nil {
			return err
		}
		a.server = s
	}
	switch {
	case a.options.Cluster:
		return ClusterNodeReady(ctx, a.server)
	case a.options.Replicated:
		return ReplicatedNodeReady(ctx, a.server)
	}
	return a.server.Ping(ctx)
}

func (a *Agent) connect() (*valkey.Server, error) {
	auth := valkey.Auth{User: a.options.User, Password: a.password}
	if a.options.Socket != "" {
		return valkey.ConnectSocket(a.options.Socket, auth)
	}
	return valkey.Connect(a.host, a.options.ServerPort, auth)
}

// Close closes the connection to the server.
func (a *Agent) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.server != nil {
		a.server.Close()
		a.server = nil
	}
}

// waitServerGone returns once the server no longer accepts connections, or with why the HTTP
// server stopped: the pod is stopping, and the agent answers probes as long as its server may
// serve.
func (a *Agent) waitServerGone(served <-chan error) error {
	network, addr := "tcp", net.JoinHostPort(a.host, strconv.Itoa(a.options.ServerPort))
	if a.options.Socket != "" {
		network, addr = "unix", a.options.Socket
	}
	tick := time.NewTicker(goneAfterStop)
	defer tick.Stop()
	for {
		conn, err := net.DialTimeout(network, addr, goneAfterStop)
		if err != nil {
			return nil
		}
		_ = conn.Close()
		select {
		case err := <-served:
			return err
		case <-tick.C:
		}
	}
}

// ClusterNodeReady reports why the Cluster node is not ready, or nil: it is ready as a replica
// whose link to its primary is up (which it is once it has loaded its primary's data), or as a
// primary that serves slots. A primary with no slot is a node that has not joined the cluster
// yet, such as the new, empty node of a replica's pod just replaced: ready, it would let a drain
// take the shard's primary before that node is its replica in sync.
func ClusterNodeReady(ctx context.Context, s *valkey.Server) error {
	status, err := s.Status(ctx)
	switch {
	case err != nil:
		return err
	case status.LinkUp:
		return nil
	case !status.Primary:
		return errors.New("a replica whose link to its primary is down")
	}
	nodes, err := s.ClusterNodes(ctx)
	if err != nil {
		return err
	}
	if self, _ := valkey.Myself(nodes); self.SlotsServed() > 0 {
		return nil
	}
	return errors.New("a primary that serves no slot")
}

// ReplicatedNodeReady reports why the Replicated Cache's node is not ready, or nil: it is ready as
// the primary, or as a replica whose link to its primary is up. A server the operator has not
// given a role yet is a replica of no one it can reach (resources.HoldAddress), and not ready: it
// serves none of the Cache's keys.
func ReplicatedNodeReady(ctx context.Context, s *valkey.Server) error {
	status, err := s.Status(ctx)
	switch {
	case err != nil:
		return err
	case status.Primary, status.LinkUp:
		return nil
	}
	return errors.New("a replica whose link to its primary is down, or a server not given a role yet")
}
