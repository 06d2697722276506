//go:build integration

package schedulecontroller

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/controller"
	"example.com/cache-operator/test/harness/testenv"
)

// The tests share one real etcd and kube-apiserver, each in a namespace of its own. They run the
// reconciler pass by pass against a fake clock: a one-minute schedule's day in a second.
var k8s client.Client

func TestMain(m *testing.M) {
	testenv.Main(m, func(cfg *rest.Config) (err error) {
		k8s, err = client.New(cfg, client.Options{Scheme: controller.NewScheme()})
		return err
	})
}

// world is a namespace with a Cache and a schedule of it, and a reconciler on a fake clock that
// starts at the schedule's creation.
type world struct {
	t        *testing.T
	r        *Reconciler
	clock    *clocktesting.FakePassiveClock
	schedule *cachev1alpha1.CacheBackupSchedule
}

func newWorld(t *testing.T, spec cachev1alpha1.CacheBackupScheduleSpec, withCache bool) *world {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if withCache {
		cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: spec.CacheName, Namespace: ns.Name},
			Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: "8.1.1", Memory: resource.MustParse("64Mi")}}
		if err := k8s.Create(ctx, cache); err != nil {
			t.Fatal(err)
		}
	}
	s := &cachev1alpha1.CacheBackupSchedule{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns.Name}, Spec: spec}
	if err := k8s.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, clock: clocktesting.NewFakePassiveClock(s.CreationTimestamp.Time), schedule: s}
	w.r = &Reconciler{Client: k8s, Clock: w.clock}
	return w
}

func storage() cachev1alpha1.BucketLocation {
	return cachev1alpha1.BucketLocation{Endpoint: "s3.example.internal:9000", Bucket: "caches", CredentialsSecret: "bucket-credentials"}
}

// at runs one pass with the clock at the given time and returns the schedule as stored after it.
func (w *world) at(now time.Time) (ctrl.Result, *cachev1alpha1.CacheBackupSchedule) {
	w.t.Helper()
	w.clock.SetTime(now)
	res, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(w.schedule)})
	if err != nil {
		w.t.Fatal(err)
	}
	s := &cachev1alpha1.CacheBackupSchedule{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(w.schedule), s); err != nil {
		w.t.Fatal(err)
	}
	return res, s
}

// backups are the schedule's backups as stored, by name.
func (w *world) backups() []cachev1alpha1.CacheBackup {
	w.t.Helper()
	var list cachev1alpha1.CacheBackupList
	if err := k8s.List(context.Background(), &list, client.InNamespace(w.schedule.Namespace)); err != nil {
		w.t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b cachev1alpha1.CacheBackup) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return list.Items
}

func (w *world) names() []string {
	var names []string
	for _, b := range w.backups() {
		names = append(names, b.Name)
	}
	slices.Sort(names)
	return names
}

// end ends the backup as the backup controller would: completed or failed, at the clock's time.
func (w *world) end(name string, phase cachev1alpha1.BackupPhase) {
	w.t.Helper()
	b := &cachev1alpha1.CacheBackup{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: w.schedule.Namespace, Name: name}, b); err != nil {
		w.t.Fatal(err)
	}
	b.Status.Phase = phase
	b.Status.CompletionTime = &metav1.Time{Time: w.clock.Now()}
	if err := k8s.Status().Update(context.Background(), b); err != nil {
		w.t.Fatal(err)
	}
}

func reason(s *cachev1alpha1.CacheBackupSchedule) string {
	if c := meta.FindStatusCondition(s.Status.Conditions, cachev1alpha1.ConditionScheduling); c != nil {
		return c.Reason
	}
	return ""
}

// A one-minute schedule makes one backup a minute, named after its time and deleted with its
// objects; never two at once; one for the latest time missed while the operator was down; none
// again after a pass that crashed before its status write; and keeps the newest completed ones
// (a failed one until a later one completes).
func TestAScheduleMakesOneBackupAtATimeAndKeepsTheNewest(t *testing.T) {
	w := newWorld(t, cachev1alpha1.CacheBackupScheduleSpec{CacheName: "orders", Schedule: "* * * * *", Storage: storage(), Keep: 2}, true)
	start := w.schedule.CreationTimestamp.Time
	minute := start.Truncate(time.Minute).Add(time.Minute) // the schedule's first time

	res, s := w.at(minute.Add(-time.Second))
	if len(w.backups()) != 0 || reason(s) != cachev1alpha1.ReasonScheduled || !s.Status.NextScheduleTime.Time.Equal(minute) {
		t.Fatalf("before its first time: backups %v, status %+v", w.names(), s.Status)
	}
	if res.RequeueAfter != time.Second {
		t.Errorf("a second before its time the schedule comes back in %v, want 1s", res.RequeueAfter)
	}

	name := func(at time.Time) string { return "nightly-" + at.UTC().Format("200601021504") }
	_, s = w.at(minute.Add(5 * time.Second))
	first := w.backups()
	if len(first) != 1 || first[0].Name != name(minute) || first[0].Spec.DeletionPolicy != cachev1alpha1.DeletionDelete ||
		first[0].Labels[cachev1alpha1.LabelSchedule] != "nightly" || first[0].Spec.CacheName != "orders" || len(first[0].OwnerReferences) != 0 {
		t.Fatalf("at its first time: backups %+v", first)
	}
	if !s.Status.LastScheduleTime.Time.Equal(minute) || s.Status.LastBackup != name(minute) {
		t.Errorf("status after the first backup: %+v", s.Status)
	}
	// An unchanged pass writes nothing.
	if _, again := w.at(minute.Add(6 * time.Second)); again.ResourceVersion != s.ResourceVersion || len(w.backups()) != 1 {
		t.Errorf("a second pass wrote the schedule or made a backup: %v", w.names())
	}

	// Due again while the first is pending: none is made, and the schedule says why.
	_, s = w.at(minute.Add(time.Minute + time.Second))
	if got := w.names(); len(got) != 1 || reason(s) != cachev1alpha1.ReasonPreviousBackupRunning {
		t.Fatalf("due while the previous runs: backups %v, reason %s", got, reason(s))
	}
	w.end(name(minute), cachev1alpha1.BackupCompleted)
	_, s = w.at(minute.Add(time.Minute + 30*time.Second))
	if got := w.names(); !slices.Equal(got, []string{name(minute), name(minute.Add(time.Minute))}) {
		t.Fatalf("once the previous ended: backups %v", got)
	}
	if s.Status.LastSuccessfulTime == nil || reason(s) != cachev1alpha1.ReasonScheduled {
		t.Errorf("after a completed backup: status %+v", s.Status)
	}

	// A pass that made a backup and crashed before its status write: the next makes none again.
	s.Status.LastScheduleTime, s.Status.LastBackup = &metav1.Time{Time: minute}, name(minute)
	if err := k8s.Status().Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if _, s = w.at(minute.Add(time.Minute + 40*time.Second)); len(w.backups()) != 2 || !s.Status.LastScheduleTime.Time.Equal(minute.Add(time.Minute)) {
		t.Fatalf("after a lost status write: backups %v, status %+v", w.names(), s.Status)
	}

	// The operator down for ten minutes: one backup, for the latest time missed.
	w.end(name(minute.Add(time.Minute)), cachev1alpha1.BackupCompleted)
	late := minute.Add(12 * time.Minute)
	w.at(late.Add(20 * time.Second))
	if got := w.names(); !slices.Contains(got, name(late)) || len(got) != 3 {
		t.Fatalf("after ten missed minutes: backups %v, want one more, %s", got, name(late))
	}

	// Keep 2: once the third completes, the oldest goes.
	w.end(name(late), cachev1alpha1.BackupCompleted)
	w.at(late.Add(30 * time.Second))
	if got := w.names(); !slices.Equal(got, []string{name(minute.Add(time.Minute)), name(late)}) {
		t.Fatalf("with three completed and keep 2: backups %v", got)
	}

	// A failed backup stays until a later one completes; then it goes too.
	w.at(late.Add(time.Minute))
	w.end(name(late.Add(time.Minute)), cachev1alpha1.BackupFailed)
	w.at(late.Add(time.Minute + 10*time.Second))
	if got := w.names(); !slices.Contains(got, name(late.Add(time.Minute))) {
		t.Fatalf("the failed backup was deleted before a later one completed: %v", got)
	}
	w.at(late.Add(2 * time.Minute))
	w.end(name(late.Add(2*time.Minute)), cachev1alpha1.BackupCompleted)
	w.at(late.Add(2*time.Minute + 10*time.Second))
	if got := w.names(); !slices.Equal(got, []string{name(late), name(late.Add(2 * time.Minute))}) {
		t.Fatalf("after a later backup completed: backups %v, want the newest two completed only", got)
	}
}

// A schedule that cannot make backups says why, makes none, and does not come back on its own.
func TestAScheduleThatCannotRunSaysWhy(t *testing.T) {
	for _, c := range []struct {
		name      string
		spec      cachev1alpha1.CacheBackupScheduleSpec
		withCache bool
		reason    string
	}{
		{"invalid", cachev1alpha1.CacheBackupScheduleSpec{CacheName: "orders", Schedule: "61 * * * *", Storage: storage(), Keep: 1}, true, cachev1alpha1.ReasonInvalidSchedule},
		{"suspended", cachev1alpha1.CacheBackupScheduleSpec{CacheName: "orders", Schedule: "* * * * *", Storage: storage(), Keep: 1, Suspend: true}, true, cachev1alpha1.ReasonSuspended},
		{"no cache", cachev1alpha1.CacheBackupScheduleSpec{CacheName: "orders", Schedule: "* * * * *", Storage: storage(), Keep: 1}, false, cachev1alpha1.ReasonCacheNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, c.spec, c.withCache)
			res, s := w.at(w.schedule.CreationTimestamp.Add(3 * time.Minute))
			cond := meta.FindStatusCondition(s.Status.Conditions, cachev1alpha1.ConditionScheduling)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != c.reason || len(w.backups()) != 0 {
				t.Fatalf("condition %+v, backups %v; want False/%s and none", cond, w.names(), c.reason)
			}
			if c.reason != cachev1alpha1.ReasonCacheNotFound && (res.RequeueAfter != 0 || s.Status.NextScheduleTime != nil) {
				t.Errorf("comes back in %v, next %v; want neither", res.RequeueAfter, s.Status.NextScheduleTime)
			}
		})
	}
}
