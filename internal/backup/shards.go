package backup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"example.com/cache-operator/internal/valkey"
)

// What the agent checks of the shards it copies: what each server holds, and that the cluster is
// whole and moves no slot while the copy lasts.

// inspectShard is what the shard's server says of its data, and fails for a server that holds
// keys in a database other than 0: a backup counts, and a restore checks, database 0's keys only
// (a Cluster has no other).
func inspectShard(ctx context.Context, s Shard) (valkey.Dataset, error) {
	server, err := connect(s.Addr)
	if err != nil {
		return valkey.Dataset{}, fmt.Errorf("shard %s from %s: %w", s.Name, s.Source, err)
	}
	defer server.Close()
	dbs, err := server.Databases(ctx)
	if err != nil {
		return valkey.Dataset{}, fmt.Errorf("shard %s from %s: %w", s.Name, s.Source, err)
	}
	if i := slices.IndexFunc(dbs, func(db int) bool { return db != 0 }); i >= 0 {
		return valkey.Dataset{}, fmt.Errorf("shard %s from %s holds keys in database %d: a backup holds database 0 only", s.Name, s.Source, dbs[i])
	}
	d, err := server.Dataset(ctx)
	if err != nil {
		return valkey.Dataset{}, fmt.Errorf("shard %s from %s: %w", s.Name, s.Source, err)
	}
	return d, nil
}

// datasetAt is what the server at addr says of its data.
func datasetAt(ctx context.Context, addr string) (valkey.Dataset, error) {
	server, err := connect(addr)
	if err != nil {
		return valkey.Dataset{}, err
	}
	defer server.Close()
	return server.Dataset(ctx)
}

// wholeCluster fails unless the shards' slots are every slot, each once: a shard whose
// slots moved since the operator chose the servers (a scale-out that ended meanwhile) would
// leave keys out.
func wholeCluster(shards []Shard) error {
	owner := make([]string, valkey.SlotCount)
	for _, s := range shards {
		for _, r := range s.Slots {
			for slot := r.Start; slot <= r.End; slot++ {
				if owner[slot] != "" {
					return fmt.Errorf("slot %d is in shards %s and %s: the cluster changed since the backup started; make another", slot, owner[slot], s.Name)
				}
				owner[slot] = s.Name
			}
		}
	}
	if slot := slices.Index(owner, ""); slot >= 0 {
		return fmt.Errorf("slot %d is in none of the shards copied: the cluster changed since the backup started; make another", slot)
	}
	return nil
}

// shardSlots are the slots of the shard the Cluster node at addr belongs to, and its primary's
// address: its own if it is a primary, its primary's if it is a replica. A shard with a slot moving in or out fails: the
// slot's keys are in two shards at once. Valkey prints a slot's migrating and importing marks on
// the myself line of CLUSTER NODES only, so a replica's shard is read from its primary itself.
func shardSlots(ctx context.Context, addr string) ([]valkey.SlotRange, string, error) {
	me, nodes, err := myself(ctx, addr)
	if err != nil {
		return nil, "", err
	}
	primary, primaryAddr := me, addr
	if !me.Primary {
		i := slices.IndexFunc(nodes, func(n valkey.ClusterNode) bool { return n.ID == me.PrimaryID })
		if i < 0 || nodes[i].IP == "" {
			return nil, "", fmt.Errorf("the node replicates %s, whose address it does not list", me.PrimaryID)
		}
		primaryAddr = net.JoinHostPort(nodes[i].IP, strconv.Itoa(nodes[i].Port))
		if primary, _, err = myself(ctx, primaryAddr); err != nil {
			return nil, "", fmt.Errorf("its primary at %s: %w", primaryAddr, err)
		}
		if primary.ID != me.PrimaryID {
			return nil, "", fmt.Errorf("its primary %s is not at %s, where %s answers", me.PrimaryID, primaryAddr, primary.ID)
		}
	}
	if len(primary.Migrating)+len(primary.Importing) > 0 {
		return nil, "", errors.New("slots are moving in or out of the shard: make the backup once the Cache is Ready")
	}
	return primary.Slots, primaryAddr, nil
}

// primaryOf is the address of the primary whose data the server at addr holds, outside Cluster
// mode: addr itself for a primary; for a replica (a Replicated Cache's), its primary's, once the
// replica has every write that the primary had taken when asked (its offset has reached the
// primary's), so that the backup holds every write acknowledged before it started, whichever
// replica acknowledged it. A replica whose link is down, or that does not catch up within wait,
// fails the backup: it may lack writes.
func primaryOf(ctx context.Context, addr string, wait time.Duration) (string, error) {
	replica, err := connect(addr)
	if err != nil {
		return "", err
	}
	defer replica.Close()
	status, err := replica.Status(ctx)
	if err != nil || status.Primary {
		return addr, err
	}
	primaryAddr := net.JoinHostPort(status.PrimaryIP, strconv.Itoa(status.PrimaryPort))
	if !status.LinkUp {
		return "", fmt.Errorf("the replica's link to its primary at %s is down, so it may lack writes: make the backup once the Cache is Ready", primaryAddr)
	}
	primary, err := connect(primaryAddr)
	if err != nil {
		return "", fmt.Errorf("its primary at %s: %w", primaryAddr, err)
	}
	defer primary.Close()
	taken, err := primary.Status(ctx)
	if err != nil {
		return "", fmt.Errorf("its primary at %s: %w", primaryAddr, err)
	}
	deadline := time.Now().Add(wait)
	for status.StreamOffset < taken.StreamOffset {
		switch {
		case !status.LinkUp:
			return "", fmt.Errorf("the replica's link to its primary at %s went down before it had the primary's writes: make the backup once the Cache is Ready", primaryAddr)
		case time.Now().After(deadline):
			return "", fmt.Errorf("the replica is at offset %d of its primary's %d after %s: it lags too far to copy every write the primary took", status.StreamOffset, taken.StreamOffset, wait)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(catchUpPoll):
		}
		if status, err = replica.Status(ctx); err != nil {
			return "", err
		}
	}
	return primaryAddr, nil
}

// catchUpPoll is how often the agent asks a replica how far it has got (primaryOf): a replica in
// sync has the writes of the moment before within milliseconds.
const catchUpPoll = 50 * time.Millisecond

// myself is how the Cluster node at addr sees itself, and the nodes it lists.
func myself(ctx context.Context, addr string) (valkey.ClusterNode, []valkey.ClusterNode, error) {
	server, err := connect(addr)
	if err != nil {
		return valkey.ClusterNode{}, nil, err
	}
	defer server.Close()
	nodes, err := server.ClusterNodes(ctx)
	if err != nil {
		return valkey.ClusterNode{}, nil, err
	}
	me, ok := valkey.Myself(nodes)
	if !ok {
		return valkey.ClusterNode{}, nil, errors.New("the node does not list itself in CLUSTER NODES")
	}
	return me, nodes, nil
}

// slotsUnmoved fails if a shard's slots changed while its snapshot was taken: a migration then
// may have moved keys out of it after, or into it before, its snapshot, and the backup would not
// hold every key once.
func slotsUnmoved(ctx context.Context, shards []Shard) error {
	for _, s := range shards {
		now, _, err := shardSlots(ctx, s.Addr)
		if err != nil {
			return fmt.Errorf("shard %s from %s, after its snapshot: %w", s.Name, s.Source, err)
		}
		if !slices.Equal(now, s.Slots) {
			return fmt.Errorf("shard %s's slots changed during the backup (%v, then %v): slots moved, and a snapshot may miss their keys", s.Name, s.Slots, now)
		}
	}
	return nil
}
