package backupcontroller

import (
	"context"
	"testing"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/controller"
)

// informerRecorder is a manager's cache that records what asks it for an informer or an index
// before the manager starts, and does nothing else.
type informerRecorder struct {
	cache.Cache
	asked []client.Object
}

func (r *informerRecorder) IndexField(_ context.Context, obj client.Object, _ string, _ client.IndexerFunc) error {
	r.asked = append(r.asked, obj)
	return nil
}

func (r *informerRecorder) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	r.asked = append(r.asked, obj)
	return nil, nil
}

// Setting the controller up makes no informer of Caches: the manager waits for every informer
// made before it starts to sync before it starts anything else, the conversion webhook's
// certificate included, and listing Caches stored as v1 needs that webhook. An operator upgraded
// from v1 then never started (an index on the Caches did that once).
func TestSettingUpMakesNoInformerOfCaches(t *testing.T) {
	recorder := &informerRecorder{}
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Scheme:   controller.NewScheme(),
		NewCache: func(*rest.Config, cache.Options) (cache.Cache, error) { return recorder, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&Reconciler{}).SetupWithManager(t.Context(), mgr, 1); err != nil {
		t.Fatal(err)
	}
	for _, obj := range recorder.asked {
		if _, ok := obj.(*cachev2.Cache); ok {
			t.Errorf("setting up asked for an informer or an index of Caches")
		}
	}
	if len(recorder.asked) == 0 {
		t.Error("setting up asked for no informer at all: the recorder records nothing")
	}
}
