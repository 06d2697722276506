package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestAFailingCacheIsRetriedAtMostAMinuteApart(t *testing.T) {
	limiter := retryBackoff()
	item := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "orders-cache"}}
	var last time.Duration
	for range 40 {
		last = limiter.When(item)
	}
	if last != time.Minute {
		t.Errorf("after 40 failures the next retry is %s away, want a minute", last)
	}
	limiter.Forget(item)
	if first := limiter.When(item); first > 10*time.Millisecond {
		t.Errorf("after a success the next failure is retried %s later, want within 10ms", first)
	}
}
