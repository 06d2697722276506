package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CacheBackupScheduleSpec says when to back up which Cache, where to, and how many backups to keep.
type CacheBackupScheduleSpec struct {
	// CacheName is the Cache, in the schedule's namespace, to back up.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=52
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +required
	CacheName string `json:"cacheName"`

	// Schedule is when backups are made, in UTC, as a CronJob's schedule: five fields (minute,
	// hour, day of month, month, day of week), or @hourly, @daily, @weekly, @monthly, @yearly.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|([0-9A-Za-z*/,?-]+[ \t]+){4}[0-9A-Za-z*/,?-]+)$`
	// +required
	Schedule string `json:"schedule"`

	// Storage is the bucket the backups are written to.
	//
	// +required
	Storage BucketLocation `json:"storage"`

	// Keep is how many completed backups the schedule keeps: once a backup completes, the
	// schedule's completed backups past the newest Keep are deleted, with their objects. Failed
	// backups are kept until a later one completes, so that their reasons can be read, and at
	// most Keep of them.
	//
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=7
	// +optional
	Keep int32 `json:"keep,omitempty"`

	// Suspend stops new backups from being made; those made go on, and are kept as Keep says.
	//
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// CacheBackupScheduleStatus is what the operator knows of the schedule.
type CacheBackupScheduleStatus struct {
	// Conditions: Scheduling, with the reason while no backups are made.
	//
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastScheduleTime is the time of the latest backup made (its scheduled time, not when it
	// was made: an operator that was down makes one backup for the latest time it missed).
	//
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// LastBackup is the name of the latest backup made.
	//
	// +optional
	LastBackup string `json:"lastBackup,omitempty"`

	// LastSuccessfulTime is when the latest of the schedule's backups to complete completed.
	//
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`

	// NextScheduleTime is when the next backup is due.
	//
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
}

// CacheBackupSchedule makes a CacheBackup of a Cache at the times its schedule says, one at a
// time, and keeps the newest few. Its backups are named <schedule>-<UTC time as YYYYMMDDhhmm>
// and labelled cache.example.com/schedule=<schedule>; they do not belong to it, so that deleting
// a schedule stops new backups and leaves the ones it made.
//
// The name is held to what its backups' names need: a DNS label of at most 43 characters.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (lower-case letters, digits and '-', starting with a letter): it also names the schedule's backups"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 43",message="metadata.name must be at most 43 characters: the schedule's backups' names extend it"
// +kubebuilder:resource:shortName=cbks,categories=all
// +kubebuilder:printcolumn:name="Cache",type=string,JSONPath=`.spec.cacheName`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Last",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Last Success",type=date,JSONPath=`.status.lastSuccessfulTime`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Scheduling")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CacheBackupSchedule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec CacheBackupScheduleSpec `json:"spec"`
	// +optional
	Status CacheBackupScheduleStatus `json:"status,omitempty"`
}

// CacheBackupScheduleList is a list of CacheBackupSchedules.
//
// +kubebuilder:object:root=true
type CacheBackupScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CacheBackupSchedule `json:"items"`
}

// LabelSchedule, on a CacheBackup, names the schedule that made it.
const LabelSchedule = "cache.example.com/schedule"

// ScheduledBackupNameLayout is the layout of the time in a scheduled backup's name (in UTC).
const ScheduledBackupNameLayout = "200601021504"
