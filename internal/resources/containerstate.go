package resources

import "slices"

// cannotStart are the reasons a kubelet gives a container that waits and will not start on its
// own, for something only a user can fix: its image cannot be pulled or named, or its
// configuration made (a Secret or ConfigMap it needs is missing).
var cannotStart = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
	"CreateContainerConfigError", "CreateContainerError"}

// CannotStart reports whether a container waiting for the reason given will not start on its own.
func CannotStart(reason string) bool { return slices.Contains(cannotStart, reason) }
