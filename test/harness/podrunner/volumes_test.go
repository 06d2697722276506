package podrunner

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Paths under a container's mounts move to the directories that stand for the volumes, wherever
// they are in an argument, and only once; other paths stay.
func TestPathsUnderMountsMoveToTheVolumesDirectories(t *testing.T) {
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "tls", MountPath: "/tls/"}}}
	mounts := mountsOf(c, map[string]string{"data": "/w/pod/data", "tls": "/w/pod/volumes/tls"})
	got := onHostPaths([]string{
		"--tls-cert-file", "/tls/tls.crt", "--redis.addr=unix:///data/valkey.sock", "/data",
		`cat /tls/ca.crt > /data/ca.crt`, "/database/x", "tls/tls.crt",
	}, mounts)
	want := []string{
		"--tls-cert-file", "/w/pod/volumes/tls/tls.crt", "--redis.addr=unix:///w/pod/data/valkey.sock", "/w/pod/data",
		`cat /w/pod/volumes/tls/ca.crt > /w/pod/data/ca.crt`, "/database/x", "tls/tls.crt",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
