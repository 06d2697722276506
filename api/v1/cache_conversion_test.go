package v1

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/randfill"

	cachev2 "example.com/cache-operator/api/v2"
)

// filler generates objects with every field set at random. Quantities get canonical values, as
// the API server stores them; times get whole seconds, as JSON keeps them.
func filler(seed uint64) *randfill.Filler {
	return randfill.NewWithSeed(int64(seed)).NilChance(0.2).NumElements(0, 3).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewQuantity(c.Int63n(1<<36), resource.BinarySI)
		},
		func(t *metav1.Time, c randfill.Continue) {
			*t = metav1.Unix(c.Int63n(1<<32), 0)
		},
	)
}

func TestV2ToV1AndBackIsLossless(t *testing.T) {
	for i := range 2000 {
		f := filler(uint64(i))
		var original cachev2.Cache
		f.Fill(&original)
		if r := rand.New(rand.NewPCG(uint64(i), 0)); i%2 == 0 { // half of them the kind the operator makes
			original.Spec.Mode = []cachev2.Mode{cachev2.ModeStandalone, cachev2.ModeCluster, cachev2.ModeReplicated}[r.IntN(3)]
			original.Spec.Shards = r.Int32N(cachev2.MaxClusterShards) + 1
		}
		delete(original.Annotations, AnnotationV2Fields)
		original.TypeMeta = metav1.TypeMeta{} // the webhook sets it, not the conversion

		var spoke Cache
		if err := spoke.ConvertFrom(original.DeepCopy()); err != nil {
			t.Fatalf("v2 → v1: %v", err)
		}
		var back cachev2.Cache
		if err := spoke.ConvertTo(&back); err != nil {
			t.Fatalf("v1 → v2: %v", err)
		}
		if !equality.Semantic.DeepEqual(&original, &back) {
			t.Fatalf("v2 → v1 → v2 changed the object (-original +back):\n%s", cmp.Diff(&original, &back))
		}
	}
}

func TestV1ToV2AndBackIsLossless(t *testing.T) {
	for i := range 2000 {
		var original Cache
		filler(uint64(i)).Fill(&original)
		delete(original.Annotations, AnnotationV2Fields)
		original.TypeMeta = metav1.TypeMeta{}
		original.Spec.Replicas = rand.New(rand.NewPCG(uint64(i), 0)).Int32N(cachev2.MaxStandaloneShards) + 1

		var hub cachev2.Cache
		if err := original.DeepCopy().ConvertTo(&hub); err != nil {
			t.Fatalf("v1 → v2: %v", err)
		}
		var back Cache
		if err := back.ConvertFrom(&hub); err != nil {
			t.Fatalf("v2 → v1: %v", err)
		}
		if !equality.Semantic.DeepEqual(&original, &back) {
			t.Fatalf("v1 → v2 → v1 changed the object (-original +back):\n%s", cmp.Diff(&original, &back))
		}
	}
}

func TestV1ReplicasAreStandaloneShards(t *testing.T) {
	v1 := Cache{Spec: CacheSpec{Replicas: 3, Version: "8.1.1", Memory: resource.MustParse("256Mi")}}
	var v2 cachev2.Cache
	if err := v1.ConvertTo(&v2); err != nil {
		t.Fatal(err)
	}
	want := cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 3, Version: "8.1.1", Memory: resource.MustParse("256Mi")}
	if !equality.Semantic.DeepEqual(v2.Spec, want) {
		t.Errorf("v1 replicas: 3 became %+v, want %+v", v2.Spec, want)
	}
	var again Cache
	if err := again.ConvertFrom(&v2); err != nil {
		t.Fatal(err)
	}
	if _, ok := again.Annotations[AnnotationV2Fields]; ok {
		t.Errorf("a Standalone Cache read through v1 carries %s; v1 can hold all of it", AnnotationV2Fields)
	}
}

func TestAClusterReadThroughV1AndScaledByAV1ClientChangesItsShards(t *testing.T) {
	cluster := cachev2.Cache{Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 12, ReplicasPerShard: new(int32(1)), Version: "8.1.1"}}
	var v1 Cache
	if err := v1.ConvertFrom(&cluster); err != nil {
		t.Fatal(err)
	}
	if v1.Spec.Replicas != cachev2.MaxStandaloneShards {
		t.Errorf("v1 replicas = %d, want %d, within v1's schema", v1.Spec.Replicas, cachev2.MaxStandaloneShards)
	}
	v1.Spec.Replicas = 4 // kubectl scale through v1
	var v2 cachev2.Cache
	if err := v1.ConvertTo(&v2); err != nil {
		t.Fatal(err)
	}
	if v2.Spec.Mode != cachev2.ModeCluster || v2.Spec.Shards != 4 || v2.Spec.ReplicasOrZero() != 1 {
		t.Errorf("after a v1 scale to 4: %+v, want a Cluster of 4 shards with 1 replica each", v2.Spec)
	}
}

func TestABrokenV2FieldsAnnotationIsRefusedWithAClearError(t *testing.T) {
	v1 := Cache{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationV2Fields: "{"}}}
	err := v1.ConvertTo(&cachev2.Cache{})
	if err == nil {
		t.Fatal("a broken annotation was accepted")
	}
	if want := "remove it to treat the Cache as Standalone"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}
