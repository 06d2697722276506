package resources

import (
	"encoding/json"
	"reflect"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Two children of a Cache, decoded each on its own as an informer decodes them, hold one copy
// of the strings they repeat once cut down for the cache, and the same values as before.
func TestCachedMetaSharesTheStringsChildrenRepeat(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "orders", Namespace: "shop", UID: "sts-uid", ResourceVersion: "7",
		Labels: map[string]string{LabelInstance: "orders", LabelManagedBy: ManagedBy},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "cache.example.com/v2", Kind: "Cache", Name: "orders", UID: "cache-uid",
			Controller: ptr.To(true)}}}
	raw, err := json.Marshal(corev1.Secret{ObjectMeta: meta})
	if err != nil {
		t.Fatal(err)
	}
	var decoded [2]corev1.Secret
	for i := range decoded {
		if err := json.Unmarshal(raw, &decoded[i]); err != nil {
			t.Fatal(err)
		}
	}
	a, b := CachedMeta(decoded[0].ObjectMeta), CachedMeta(decoded[1].ObjectMeta)
	if !reflect.DeepEqual(a, meta) {
		t.Errorf("cut down, the metadata changed:\n%+v\nwant\n%+v", a, meta)
	}
	same := func(what, x, y string) {
		if unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: each object holds its own copy of %q", what, x)
		}
	}
	same("namespace", a.Namespace, b.Namespace)
	same("name", a.Name, b.Name)
	same("a label's value", a.Labels[LabelInstance], b.Labels[LabelInstance])
	same("the owner's UID", string(a.OwnerReferences[0].UID), string(b.OwnerReferences[0].UID))
	for k := range a.Labels {
		for l := range b.Labels {
			if k == l {
				same("a label's key", k, l)
			}
		}
	}
}
