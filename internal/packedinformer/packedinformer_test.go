package packedinformer

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// events hands on what an event handler is given, in order.
type events chan event

type event struct {
	what string
	obj  any
}

func (e events) OnAdd(obj any, _ bool)  { e <- event{"add", obj} }
func (e events) OnUpdate(_, newObj any) { e <- event{"update", newObj} }
func (e events) OnDelete(obj any)       { e <- event{"delete", obj} }

func secret(name, rv string, data string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: rv,
		Labels: map[string]string{"app": "orders"}, Annotations: map[string]string{"dropped": "by the transform"}},
		Data: map[string][]byte{"password": []byte(data)}}
}

func TestAPackedInformerStoresEncodingsAndHandsOutDecodedObjects(t *testing.T) {
	w := watch.NewFake()
	lw := listWatch{&toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.SecretList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []corev1.Secret{*secret("a", "1", "first")}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return w, nil },
	}}
	inf := For(&corev1.Secret{})(lw, &corev1.Secret{}, 0, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	// As controller-runtime sets its transforms: after the informer is made.
	if err := inf.SetTransform(func(obj any) (any, error) {
		s := obj.(*corev1.Secret).DeepCopy()
		s.Annotations = nil
		return s, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := inf.AddIndexers(toolscache.Indexers{"password": func(obj any) ([]string, error) {
		return []string{string(obj.(*corev1.Secret).Data["password"])}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	seen := make(events, 8)
	if _, err := inf.AddEventHandler(seen); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("never synced")
	}
	w.Modify(secret("a", "2", "second"))
	w.Add(secret("b", "3", "third"))
	w.Delete(secret("b", "4", "third"))

	want := []struct {
		what, name, password string
	}{{"add", "a", "first"}, {"update", "a", "second"}, {"add", "b", "third"}, {"delete", "b", "third"}}
	for i, w := range want {
		var e event
		select {
		case e = <-seen:
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d (%s of %s) never came", i, w.what, w.name)
		}
		what, obj := e.what, e.obj
		s, ok := obj.(*corev1.Secret)
		if what != w.what || !ok || s.Name != w.name || string(s.Data["password"]) != w.password || s.Annotations != nil || s.Labels["app"] != "orders" {
			t.Errorf("event %d: %s of %#v, want %s of %s with password %q, its labels, and no annotations", i, what, obj, w.what, w.name, w.password)
		}
	}

	// What the informer itself holds is the encoding.
	inner := inf.(*informer).SharedIndexInformer.GetIndexer().List()
	if len(inner) != 1 || reflect.TypeOf(inner[0]) != reflect.TypeOf(&packed{}) {
		t.Fatalf("the informer holds %#v, want one packed object", inner)
	}
	// Its readers see it decoded, a fresh copy each time, by key, by list and by either index.
	indexer := inf.GetIndexer()
	reads := map[string]func() any{
		"by key": func() any { obj, _, _ := indexer.GetByKey("shop/a"); return obj },
		"by object": func() any {
			obj, _, _ := indexer.Get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a"}})
			return obj
		},
		"listed":                 func() any { return only(indexer.List()) },
		"by the namespace index": func() any { objs, _ := indexer.ByIndex(toolscache.NamespaceIndex, "shop"); return only(objs) },
		"by an index added":      func() any { objs, _ := indexer.ByIndex("password", "second"); return only(objs) },
		"from the store":         func() any { return only(inf.GetStore().List()) },
	}
	for how, read := range reads {
		first, ok := read().(*corev1.Secret)
		if !ok || string(first.Data["password"]) != "second" || first.ResourceVersion != "2" {
			t.Errorf("%s: read %#v, want secret a at resource version 2", how, first)
			continue
		}
		first.Data["password"] = []byte("changed by a reader")
		if again := read().(*corev1.Secret); string(again.Data["password"]) != "second" {
			t.Errorf("%s: a reader's change reached the informer: %q", how, again.Data["password"])
		}
	}
}

func TestAPackedInformerLeavesOtherKindsAlone(t *testing.T) {
	inf := For(&corev1.Secret{})(&toolscache.ListWatch{}, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	if _, packs := inf.(*informer); packs {
		t.Error("a ConfigMap informer packs its objects; only Secrets were asked for")
	}
}

func TestATombstoneIsUnpacked(t *testing.T) {
	c := codec{typ: reflect.TypeOf(corev1.Secret{})}
	p, err := c.pack(secret("a", "1", "first"))
	if err != nil {
		t.Fatal(err)
	}
	tombstone, ok := c.unpack(toolscache.DeletedFinalStateUnknown{Key: "shop/a", Obj: p}).(toolscache.DeletedFinalStateUnknown)
	if s, isSecret := tombstone.Obj.(*corev1.Secret); !ok || !isSecret || string(s.Data["password"]) != "first" {
		t.Errorf("unpacked %#v, want a tombstone of secret a", tombstone)
	}
}

// listWatch lists and then watches, as an API server does that does not stream its list.
type listWatch struct{ *toolscache.ListWatch }

func (listWatch) IsWatchListSemanticsUnSupported() bool { return true }

func only(objs []any) any {
	if len(objs) != 1 {
		return objs
	}
	return objs[0]
}
