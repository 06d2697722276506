package controller

import (
	"testing"
	"time"
)

// A MIGRATE batch holds as many keys as fit in its bytes, at least one however large, and
// shrinks after a slow batch, down to a floor, and grows back after quick ones, up to a ceiling.
func TestKeyBatchIsBoundedByBytesAndAdaptsToHowLongBatchesTake(t *testing.T) {
	b := newKeyBatch()
	small := make([]int64, 100)
	for i := range small {
		small[i] = 100 << 10 // 100 KiB
	}
	if n := b.take(small); n != 10 {
		t.Errorf("a batch of %d bytes takes %d keys of 100 KiB, want 10", b.bytes, n)
	}
	if n := b.take([]int64{64 << 20, 1}); n != 1 {
		t.Errorf("a key larger than the batch: %d keys taken, want it alone", n)
	}

	b.took(time.Second)
	if b.bytes != keyBatchStart/2 {
		t.Errorf("after a slow batch: %d bytes, want half of %d", b.bytes, keyBatchStart)
	}
	for range 20 {
		b.took(time.Second)
	}
	if b.bytes != keyBatchMin {
		t.Errorf("after many slow batches: %d bytes, want the floor %d", b.bytes, keyBatchMin)
	}
	for range 20 {
		b.took(time.Millisecond)
	}
	if b.bytes != keyBatchMax {
		t.Errorf("after many quick batches: %d bytes, want the ceiling %d", b.bytes, keyBatchMax)
	}
	b.took(keyBatchSlow / 2)
	if b.bytes != keyBatchMax {
		t.Errorf("a batch neither slow nor quick changed the size to %d", b.bytes)
	}
}
