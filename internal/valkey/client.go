// Package valkey talks to the Valkey servers of a Cache: a connection to one server with short
// timeouts, the admin commands the operator needs to form and judge a Valkey Cluster, and parsers
// of what the servers report. It decides nothing; package topology does.
package valkey

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
)

// Timeout bounds every call to a server, connecting included: a reconcile asks Valkey, it never
// waits on it.
const Timeout = 2 * time.Second

// Server is a connection to one Valkey server.
type Server struct {
	Addr   string
	auth   Auth
	client valkeygo.Client
}

// Auth is who a connection authenticates as, and whether it speaks TLS; the zero Auth is no one,
// in plain text, for a server without auth or TLS.
type Auth struct {
	User, Password string
	// ReplicationUser is the user replicas authenticate as, whose rights the fence takes away
	// (Fenced, Unfence); "default" when empty.
	ReplicationUser string
	// TLS, when set, is how a connection speaks TLS: the server's CA, and the name its
	// certificate must have, whatever address is dialled.
	TLS *tls.Config
}

// Connect connects to the server at ip:port, authenticating as auth says. Close it when done.
func Connect(ip string, port int, auth Auth) (*Server, error) {
	return connect(net.JoinHostPort(ip, strconv.Itoa(port)), auth, nil)
}

// ConnectSocket connects to the server listening on the Unix socket at path, as a pod's own
// containers reach their server: a socket needs no certificate, with or without TLS.
func ConnectSocket(path string, auth Auth) (*Server, error) {
	return connect(path, auth, func(ctx context.Context, path string, dialer *net.Dialer, _ *tls.Config) (net.Conn, error) {
		return dialer.DialContext(ctx, "unix", path)
	})
}

// connect connects to the server at addr, through dial unless nil (TCP, with TLS if auth has it).
func connect(addr string, auth Auth, dial func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error)) (*Server, error) {
	client, err := valkeygo.NewClient(valkeygo.ClientOption{
		InitAddress: []string{addr},
		Username:    auth.User,
		Password:    auth.Password,
		// This server only, even when it is a cluster node: admin commands are about it.
		ForceSingleClient: true,
		DisableCache:      true,
		DisableRetry:      true,
		Dialer:            net.Dialer{Timeout: Timeout},
		DialCtxFn:         dial,
		ConnWriteTimeout:  Timeout,
		TLSConfig:         auth.TLS,
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to Valkey at %s: %w", addr, err)
	}
	return &Server{Addr: addr, auth: auth, client: client}, nil
}

// Auth is who the connection authenticates as: a caller connects to the server's peers as the
// same user.
func (s *Server) Auth() Auth { return s.auth }

// Close closes the connection.
func (s *Server) Close() { s.client.Close() }

func (s *Server) do(ctx context.Context, cmd valkeygo.Completed) valkeygo.ValkeyResult {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	return s.client.Do(ctx, cmd)
}

// text is a reply of text, such as CLUSTER NODES or INFO, which RESP3 sends as a verbatim
// string: the "txt:" that says its format is not part of it.
func (s *Server) text(ctx context.Context, cmd valkeygo.Completed) (string, error) {
	reply, err := s.do(ctx, cmd).ToString()
	return strings.TrimPrefix(reply, "txt:"), err
}

func (s *Server) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s on %s: %w", what, s.Addr, err)
}

// ClusterNodes is the cluster as this server sees it (CLUSTER NODES).
func (s *Server) ClusterNodes(ctx context.Context) ([]ClusterNode, error) {
	reply, err := s.text(ctx, s.client.B().ClusterNodes().Build())
	if err != nil {
		return nil, s.wrap("CLUSTER NODES", err)
	}
	nodes, err := ParseClusterNodes(reply)
	return nodes, s.wrap("CLUSTER NODES", err)
}

// ClusterState is cluster_state from CLUSTER INFO: "ok" when every slot is served.
func (s *Server) ClusterState(ctx context.Context) (string, error) {
	reply, err := s.text(ctx, s.client.B().ClusterInfo().Build())
	if err != nil {
		return "", s.wrap("CLUSTER INFO", err)
	}
	return InfoField(reply, "cluster_state"), nil
}

// Meet makes this server shake hands with the one at ip:port, which joins its cluster.
func (s *Server) Meet(ctx context.Context, ip string, port int) error {
	return s.wrap("CLUSTER MEET", s.do(ctx, s.client.B().ClusterMeet().Ip(ip).Port(int64(port)).Build()).Error())
}

// AddSlots makes this server the owner of unassigned slots.
func (s *Server) AddSlots(ctx context.Context, ranges []SlotRange) error {
	cmd := s.client.B().ClusterAddslotsrange().StartSlotEndSlot()
	for _, r := range ranges {
		cmd = cmd.StartSlotEndSlot(int64(r.Start), int64(r.End))
	}
	return s.wrap("CLUSTER ADDSLOTSRANGE", s.do(ctx, cmd.Build()).Error())
}

// Replicate makes this server a replica of the primary with the given node ID.
func (s *Server) Replicate(ctx context.Context, primaryID string) error {
	return s.wrap("CLUSTER REPLICATE", s.do(ctx, s.client.B().ClusterReplicate().NodeId(primaryID).Build()).Error())
}

// Forget makes this server drop the node with the given ID from its view of the cluster, and
// not re-learn it from the others for a minute.
func (s *Server) Forget(ctx context.Context, nodeID string) error {
	return s.wrap("CLUSTER FORGET", s.do(ctx, s.client.B().ClusterForget().NodeId(nodeID).Build()).Error())
}

// FailoverTakeover makes this server, a replica, the primary of its shard at once, without the
// agreement of the other primaries. A server that is a primary already, as when the cluster's own
// election won the race with the operator's step, has what the step wanted: no error.
func (s *Server) FailoverTakeover(ctx context.Context) error {
	err := s.do(ctx, s.client.B().ClusterFailover().Takeover().Build()).Error()
	if err != nil && strings.Contains(err.Error(), "You should send CLUSTER FAILOVER to a replica") {
		return nil
	}
	return s.wrap("CLUSTER FAILOVER TAKEOVER", err)
}

// Status is what a server says of its release and, a replica, of its replication: whether its
// link to its primary is up, and how far into the primary's stream of writes it has got.
type Status struct {
	// Version is the server's Valkey release (versionOf).
	Version string
	// Primary is set for a primary (role:master), LinkUp and Offset for a replica.
	Primary bool
	LinkUp  bool
	Offset  int64
	// PrimaryIP and PrimaryPort are, for a replica, where its primary is, and LinkDownFor how
	// long its link has been down (0 when up, or never made).
	PrimaryIP   string
	PrimaryPort int
	LinkDownFor time.Duration
	// StreamOffset is how far into its stream of writes the server has got, a primary's own or
	// the one a replica copies (master_repl_offset).
	StreamOffset int64
	// FailingOver is set for a primary that is handing its role to a replica (FailOverTo):
	// master_failover_state is other than no-failover.
	FailingOver bool
	// Time is the server's clock when it answered (server_time_usec): what the times it reports
	// (SlotMigrations) compare with.
	Time time.Time
}

// Status reads INFO server and replication of this server.
func (s *Server) Status(ctx context.Context) (Status, error) {
	reply, err := s.text(ctx, s.client.B().Info().Section("server", "replication").Build())
	if err != nil {
		return Status{}, s.wrap("INFO server replication", err)
	}
	number := func(field string) int64 {
		n, _ := strconv.ParseInt(InfoField(reply, field), 10, 64)
		return n
	}
	return Status{
		Version:      versionOf(reply),
		Primary:      InfoField(reply, "role") == "master",
		LinkUp:       InfoField(reply, "master_link_status") == "up",
		Offset:       number("slave_repl_offset"),
		PrimaryIP:    InfoField(reply, "master_host"),
		PrimaryPort:  int(number("master_port")),
		LinkDownFor:  time.Duration(max(number("master_link_down_since_seconds"), 0)) * time.Second,
		StreamOffset: number("master_repl_offset"),
		FailingOver:  !slices.Contains([]string{"", "no-failover"}, InfoField(reply, "master_failover_state")),
		Time:         time.UnixMicro(number("server_time_usec")),
	}, nil
}

// ReplicaOf makes this server a replica of the server at ip:port (REPLICAOF), outside Cluster
// mode.
func (s *Server) ReplicaOf(ctx context.Context, ip string, port int) error {
	return s.wrap("REPLICAOF", s.do(ctx, s.client.B().Replicaof().Host(ip).Port(int64(port)).Build()).Error())
}

// Promote makes this server, a replica outside Cluster mode, a primary that takes writes
// (REPLICAOF NO ONE). It keeps its data, and its former primary's stream of writes as its own
// past, so that the other replicas of that primary can continue from where they are.
func (s *Server) Promote(ctx context.Context) error {
	return s.wrap("REPLICAOF NO ONE", s.do(ctx, s.client.B().Replicaof().No().One().Build()).Error())
}

// FailOverTo has this server, a primary outside Cluster mode, hand its role to its replica at
// ip:port (FAILOVER TO … TIMEOUT): it holds its clients' writes until that replica has every one,
// at most timeout, then makes it the primary and itself its replica; past the timeout it stays
// the primary. It answers at once, and the hand-over goes on in the server (Status.FailingOver).
func (s *Server) FailOverTo(ctx context.Context, ip string, port int, timeout time.Duration) error {
	return s.wrap("FAILOVER", s.do(ctx, s.client.B().Failover().To().Host(ip).Port(int64(port)).Timeout(timeout.Milliseconds()).Build()).Error())
}

// Ping checks that the server answers commands: PING is refused before authentication, and
// while the server loads its data.
func (s *Server) Ping(ctx context.Context) error {
	return s.wrap("PING", s.do(ctx, s.client.B().Ping().Build()).Error())
}

// NodeName is the name the server announces for itself (cluster-announce-human-nodename); empty
// if it announces none.
func (s *Server) NodeName(ctx context.Context) (string, error) {
	values, err := s.do(ctx, s.client.B().ConfigGet().Parameter("cluster-announce-human-nodename").Build()).AsStrMap()
	return values["cluster-announce-human-nodename"], s.wrap("CONFIG GET", err)
}

// LoadedAtStart is how many keys the server read from the RDB it last loaded: those it kept and
// those already expired, which it dropped (INFO persistence).
func (s *Server) LoadedAtStart(ctx context.Context) (keys int64, err error) {
	reply, err := s.text(ctx, s.client.B().Info().Section("persistence").Build())
	if err != nil {
		return 0, s.wrap("INFO persistence", err)
	}
	loaded, err := strconv.ParseInt(InfoField(reply, "rdb_last_load_keys_loaded"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO persistence of %s has no rdb_last_load_keys_loaded: %w", s.Addr, err)
	}
	expired, _ := strconv.ParseInt(InfoField(reply, "rdb_last_load_keys_expired"), 10, 64)
	return loaded + expired, nil
}

// Dataset is what a server says of the data it holds.
type Dataset struct {
	// Version is the server's Valkey release (versionOf).
	Version string
	// Memory is the memory it counts against maxmemory: used_memory less what eviction leaves
	// out (client and replication buffers).
	Memory int64
	// Keys are the keys of database 0, Evicted those evicted since the server started.
	Keys, Evicted int64
}

// Dataset reads INFO server, memory, stats and keyspace of the server.
func (s *Server) Dataset(ctx context.Context) (Dataset, error) {
	reply, err := s.text(ctx, s.client.B().Info().Section("server", "memory", "stats", "keyspace").Build())
	if err != nil {
		return Dataset{}, s.wrap("INFO", err)
	}
	number := func(field string) int64 {
		n, _ := strconv.ParseInt(InfoField(reply, field), 10, 64)
		return n
	}
	d := Dataset{Version: versionOf(reply), Memory: number("used_memory") - number("mem_not_counted_for_evict"), Evicted: number("evicted_keys")}
	for field := range strings.SplitSeq(InfoField(reply, "db0"), ",") {
		if keys, ok := strings.CutPrefix(field, "keys="); ok {
			d.Keys, _ = strconv.ParseInt(keys, 10, 64)
		}
	}
	if d.Version == "" || InfoField(reply, "used_memory") == "" {
		return Dataset{}, fmt.Errorf("INFO of %s has no version or used_memory", s.Addr)
	}
	return d, nil
}

// Databases are the numbers of the databases that hold keys (INFO keyspace).
func (s *Server) Databases(ctx context.Context) ([]int, error) {
	reply, err := s.text(ctx, s.client.B().Info().Section("keyspace").Build())
	if err != nil {
		return nil, s.wrap("INFO keyspace", err)
	}
	var dbs []int
	for line := range strings.Lines(reply) {
		if name, _, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(name, "db") {
			if n, err := strconv.Atoi(strings.TrimPrefix(name, "db")); err == nil {
				dbs = append(dbs, n)
			}
		}
	}
	return dbs, nil
}
