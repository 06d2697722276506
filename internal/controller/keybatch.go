package controller

import "time"

// keyBatch sizes the MIGRATE batches of one pass by the bytes their keys take, since MIGRATE
// blocks the source's event loop, and with it every client of the source, for as long as the
// batch takes: a hundred keys of a megabyte each would take seconds, long enough for the cluster
// to fail the source over mid-migration. A batch starts at keyBatchStart and halves after one
// slower than keyBatchSlow, doubling back up to keyBatchMax after quick ones; it always moves
// at least one key.
type keyBatch struct{ bytes int64 }

const (
	keyBatchStart = 1 << 20
	keyBatchMax   = 8 << 20
	keyBatchMin   = 64 << 10
	keyBatchSlow  = 50 * time.Millisecond
)

func newKeyBatch() *keyBatch { return &keyBatch{bytes: keyBatchStart} }

// take is how many of the keys, of the given sizes, the next batch moves.
func (b *keyBatch) take(sizes []int64) int {
	n, total := 1, sizes[0]
	for n < len(sizes) && total+sizes[n] <= b.bytes {
		total += sizes[n]
		n++
	}
	return n
}

// took adapts the batch to how long the last one took.
func (b *keyBatch) took(d time.Duration) {
	switch {
	case d > keyBatchSlow:
		b.bytes = max(b.bytes/2, keyBatchMin)
	case d < keyBatchSlow/4:
		b.bytes = min(b.bytes*2, keyBatchMax)
	}
}
