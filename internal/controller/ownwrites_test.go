package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestOwnWritesAreStaleUntilTheInformerShowsAVersionPastThem(t *testing.T) {
	var w ownWrites
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	if w.stale(a, "1") {
		t.Fatal("a Cache never written is stale")
	}
	w.wrote(a, "1") // finalizer added over version 1
	w.wrote(a, "2") // then status written over version 2
	for _, rv := range []string{"1", "2"} {
		if !w.stale(a, rv) {
			t.Errorf("version %s, which our writes replaced, is not stale", rv)
		}
	}
	if w.stale(b, "2") {
		t.Error("another Cache's version counts as stale")
	}
	if w.stale(a, "3") {
		t.Error("a version none of our writes replaced is stale")
	}
	if w.stale(a, "2") {
		t.Error("once a newer version is read, the replaced ones are still remembered")
	}
	w.wrote(b, "7")
	w.forget(b)
	if w.stale(b, "7") {
		t.Error("a forgotten Cache's versions are still stale")
	}
}
