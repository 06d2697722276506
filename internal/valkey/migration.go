package valkey

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
)

// The commands below move hash slots between primaries the way `valkey-cli --cluster rebalance`
// does, which every Valkey release serves: the target is told it imports the slot, the source
// that it migrates it; the source's keys in the slot go over with MIGRATE, while clients are
// redirected with ASK for keys already moved; then every primary is told the slot's new owner,
// the target first, which raises its config epoch so that its claim wins. Each command takes
// many slots at once, pipelined, where a caller has many to set.

// SetSlotsImporting makes this server, the target, import the slots from the node sourceID.
func (s *Server) SetSlotsImporting(ctx context.Context, slots []int, sourceID string) error {
	return s.setSlots(ctx, "CLUSTER SETSLOT IMPORTING", slots, func(b valkeygo.Builder, slot int) valkeygo.Completed {
		return b.ClusterSetslot().Slot(int64(slot)).Importing().NodeId(sourceID).Build()
	})
}

// SetSlotsMigrating makes this server, the source, migrate the slots to the node targetID.
func (s *Server) SetSlotsMigrating(ctx context.Context, slots []int, targetID string) error {
	return s.setSlots(ctx, "CLUSTER SETSLOT MIGRATING", slots, func(b valkeygo.Builder, slot int) valkeygo.Completed {
		return b.ClusterSetslot().Slot(int64(slot)).Migrating().NodeId(targetID).Build()
	})
}

// SetSlotsOwner tells this server that the node ownerID serves the slots, which ends their
// migration or import on it.
func (s *Server) SetSlotsOwner(ctx context.Context, slots []int, ownerID string) error {
	return s.setSlots(ctx, "CLUSTER SETSLOT NODE", slots, func(b valkeygo.Builder, slot int) valkeygo.Completed {
		return b.ClusterSetslot().Slot(int64(slot)).Node().NodeId(ownerID).Build()
	})
}

// SetSlotsStable clears the slots' migrating or importing state on this server.
func (s *Server) SetSlotsStable(ctx context.Context, slots []int) error {
	return s.setSlots(ctx, "CLUSTER SETSLOT STABLE", slots, func(b valkeygo.Builder, slot int) valkeygo.Completed {
		return b.ClusterSetslot().Slot(int64(slot)).Stable().Build()
	})
}

// setSlotsConnections is how many connections a batch of SETSLOTs is spread over. Since Valkey
// 8.0 a primary with replicas holds each SETSLOT until its replicas acknowledge it, and the next
// command of the connection waits behind it: a round trip to the replicas per slot, which on real
// nodes under load was most of a scale-out's time. The server asks its replicas once for all the
// commands it holds at a time, so commands sent on many connections at once share one wait: 16
// slots set IMPORTING on a primary with one replica took 18-30 ms on one connection and 3-4 ms
// on sixteen (loopback, idle).
const setSlotsConnections = 16

// setSlots sends one SETSLOT per slot, built by build, spread over setSlotsConnections
// connections, each of them pipelining its share. The slots are independent of each other, so
// the order in which the server sets them does not matter.
func (s *Server) setSlots(ctx context.Context, what string, slots []int, build func(valkeygo.Builder, int) valkeygo.Completed) error {
	if len(slots) == 0 {
		return nil
	}
	perConnection := (len(slots) + setSlotsConnections - 1) / setSlotsConnections
	// Timeout per 256 slots a connection has to wait for.
	ctx, cancel := context.WithTimeout(ctx, Timeout*time.Duration(1+perConnection/256))
	defer cancel()
	errs := make([]error, len(slots))
	var wg sync.WaitGroup
	for first := 0; first < len(slots); first += perConnection {
		share := slots[first:min(first+perConnection, len(slots))]
		wg.Go(func() {
			_ = s.client.Dedicated(func(c valkeygo.DedicatedClient) error {
				cmds := make(valkeygo.Commands, len(share))
				for i, slot := range share {
					cmds[i] = build(c.B(), slot)
				}
				for i, reply := range c.DoMulti(ctx, cmds...) {
					errs[first+i] = reply.Error()
				}
				return nil
			})
		})
	}
	wg.Wait()
	// One error says it all: the failures of a batch share their cause (a lost connection, a
	// refused slot state), and a thousand of them would flood the log.
	var firstErr error
	failed := 0
	for i, err := range errs {
		if err != nil {
			if failed++; firstErr == nil {
				firstErr = s.wrap(what+" "+strconv.Itoa(slots[i]), err)
			}
		}
	}
	if failed > 1 {
		return fmt.Errorf("%w (and %d more of %d slots)", firstErr, failed-1, len(slots))
	}
	return firstErr
}

// KeysInSlot are up to count of the keys this server holds in the slot.
func (s *Server) KeysInSlot(ctx context.Context, slot, count int) ([]string, error) {
	keys, err := s.do(ctx, s.client.B().ClusterGetkeysinslot().Slot(int64(slot)).Count(int64(count)).Build()).AsStrSlice()
	return keys, s.wrap("CLUSTER GETKEYSINSLOT", err)
}

// MigrateTimeout is MIGRATE's own timeout: how long the source waits on the target for one
// step of the transfer. It is longer than any batch the operator sends takes (a few
// milliseconds on one network, see the operator's keyBatch), and the operator's deadline for the
// command is longer still, so that the source, not the client, gives up first and says why.
const MigrateTimeout = 5 * time.Second

// MigrateKeys moves keys from this server to the one at ip:port, as this connection's user,
// replacing any copy there: while
// a slot migrates, clients write a key that still exists here only here, so this copy is the
// latest. MIGRATE blocks the source while it runs, so callers keep batches small.
func (s *Server) MigrateKeys(ctx context.Context, ip string, port int, keys []string) error {
	replace := s.client.B().Migrate().Host(ip).Port(int64(port)).Key("").DestinationDb(0).
		Timeout(MigrateTimeout.Milliseconds()).Replace()
	var cmd valkeygo.Completed
	if s.auth.User != "" {
		// The target is one of the Cache's servers, which know this connection's user.
		cmd = replace.Auth2(s.auth.User, s.auth.Password).Keys(keys...).Build()
	} else {
		cmd = replace.Keys(keys...).Build()
	}
	ctx, cancel := context.WithTimeout(ctx, MigrateTimeout+Timeout)
	defer cancel()
	// A reply of NOKEY, when every key has expired or been deleted meanwhile, is no error.
	return s.wrap("MIGRATE", s.client.Do(ctx, cmd).Error())
}

// KeySizes are the bytes each key takes in this server's memory (MEMORY USAGE, which samples
// the elements of a large collection), 0 for a key that is gone; one pipelined round trip.
func (s *Server) KeySizes(ctx context.Context, keys []string) ([]int64, error) {
	cmds := make(valkeygo.Commands, len(keys))
	for i, key := range keys {
		cmds[i] = s.client.B().MemoryUsage().Key(key).Build()
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	sizes := make([]int64, len(keys))
	for i, reply := range s.client.DoMulti(ctx, cmds...) {
		size, err := reply.AsInt64()
		if err != nil && !valkeygo.IsValkeyNil(err) {
			return nil, s.wrap("MEMORY USAGE", err)
		}
		sizes[i] = size
	}
	return sizes, nil
}

// FailoverTimeout is how long a manual failover may take: Valkey gives up on one after 5 s.
const FailoverTimeout = 5 * time.Second

// Failover makes this server, a replica in sync with its primary, the primary of its shard, with
// the old primary's agreement: the primary stops taking writes until the replica has them all,
// so no acknowledged write is lost. It returns once the server says it is a primary, or after
// FailoverTimeout: the command only starts the failover, and starting it again while it runs
// would start it over.
func (s *Server) Failover(ctx context.Context) error {
	if err := s.do(ctx, s.client.B().ClusterFailover().Build()).Error(); err != nil {
		return s.wrap("CLUSTER FAILOVER", err)
	}
	ctx, cancel := context.WithTimeout(ctx, FailoverTimeout)
	defer cancel()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		nodes, err := s.ClusterNodes(ctx)
		if self, ok := Myself(nodes); err == nil && ok && self.PrimaryID == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return s.wrap("CLUSTER FAILOVER", fmt.Errorf("still a replica after %s", FailoverTimeout))
		case <-poll.C:
		}
	}
}

// ResetSoft makes this server forget the cluster: it drops every other node and its data, and
// keeps its node ID. A node leaving the cluster is reset so that it cannot tell the others about
// nodes they are forgetting, nor itself be re-learnt from them.
func (s *Server) ResetSoft(ctx context.Context) error {
	return s.wrap("CLUSTER RESET SOFT", s.do(ctx, s.client.B().ClusterReset().Soft().Build()).Error())
}
