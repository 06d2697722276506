package catalog

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Etcd is the catalogue kept in etcd.
type Etcd struct {
	Client *clientv3.Client
	Layout Layout
	// Timeout bounds each request, so a catalogue that hangs fails the pass instead of holding
	// a worker.
	Timeout time.Duration
}

var _ Catalog = (*Etcd)(nil)

// Sync reads the Cache's records and, only if they differ from the wanted ones, replaces them
// in one transaction guarded by the revision it read: a record added or changed by someone else
// meanwhile makes it fail, and the next pass reads again. (A record deleted meanwhile goes
// unnoticed; only the leader writes, and it deregisters only once the Cache is being deleted.)
func (e *Etcd) Sync(ctx context.Context, cache Key, nodes []Node, mayWrite func(context.Context) error) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.Timeout)
	defer cancel()
	dir := e.Layout.Dir(cache)
	got, err := e.Client.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", dir, err)
	}
	want := e.Layout.Records(cache, nodes)

	var ops []clientv3.Op
	stored := make(map[string]bool, len(got.Kvs))
	for _, kv := range got.Kvs {
		key := string(kv.Key)
		stored[key] = true
		if v, ok := want[key]; !ok {
			ops = append(ops, clientv3.OpDelete(key))
		} else if v != string(kv.Value) {
			ops = append(ops, clientv3.OpPut(key, v))
		}
	}
	for key, v := range want {
		if !stored[key] {
			ops = append(ops, clientv3.OpPut(key, v))
		}
	}
	if len(ops) == 0 {
		return false, nil
	}
	if mayWrite != nil {
		if err := mayWrite(ctx); err != nil {
			return false, err
		}
	}

	// No record under dir may have been added or changed since the read: such a key has a mod
	// revision above the one read.
	unchanged := clientv3.Compare(clientv3.ModRevision(dir).WithPrefix(), "<", got.Header.Revision+1)
	resp, err := e.Client.Txn(ctx).If(unchanged).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("writing %s: %w", dir, err)
	}
	if !resp.Succeeded {
		return false, fmt.Errorf("records under %s changed while being updated", dir)
	}
	return true, nil
}

// Deregister deletes every record of the Cache; deleting nothing is success.
func (e *Etcd) Deregister(ctx context.Context, cache Key) error {
	ctx, cancel := context.WithTimeout(ctx, e.Timeout)
	defer cancel()
	dir := e.Layout.Dir(cache)
	if _, err := e.Client.Delete(ctx, dir, clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("deleting %s: %w", dir, err)
	}
	return nil
}

// Listed reads the keys of every record in the zone (not their values) and returns the Caches
// they belong to.
func (e *Etcd) Listed(ctx context.Context) ([]Key, error) {
	ctx, cancel := context.WithTimeout(ctx, e.Timeout)
	defer cancel()
	dir := e.Layout.ZoneDir()
	resp, err := e.Client.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	var keys []Key
	seen := map[Key]bool{}
	for _, kv := range resp.Kvs {
		if key, ok := e.Layout.CacheOf(string(kv.Key)); ok && !seen[key] {
			seen[key] = true
			keys = append(keys, key)
		}
	}
	return keys, nil
}
