// Package v1alpha1 contains the v1alpha1 API of the cache.example.com group: CacheBackup, a
// snapshot of a Cache's data in an S3-compatible bucket, and CacheBackupSchedule, which makes
// them on a cron schedule and keeps the newest few. It has a version of its own, apart from
// the Cache's, so that it can change while it is young without touching the Cache's API.
//
// +kubebuilder:object:generate=true
// +groupName=cache.example.com
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the objects in this package.
	GroupVersion = schema.GroupVersion{Group: "cache.example.com", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &CacheBackup{}, &CacheBackupList{}, &CacheBackupSchedule{}, &CacheBackupScheduleList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
