package podrunner

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// secretVolumeSync is how often the runner brings the pods' Secret volumes up to date with their
// Secrets. The kubelet does it on its sync period, a minute by default, and later still behind
// its cache; the runner does it sooner, so that a test does not wait a minute for it.
const secretVolumeSync = 2 * time.Second

// secretVolume is a Secret volume of a pod: the Secret's keys as files in dir, which the runner
// updates in place, as the kubelet's atomic writer does, when the Secret changes.
type secretVolume struct {
	name, secret string
	optional     bool
	items        []corev1.KeyToPath
	defaultMode  int32
	dir          string
	// written is what the files hold now, by path: written when the pod starts, and after by
	// syncSecretVolumes only.
	written map[string]string
}

// mount is where a container sees a volume, and the directory that stands for it here.
type mount struct{ path, dir string }

// volumesOf makes the pod's volumes here: an emptyDir is the pod's data directory (every one of
// them: the runner keeps one per pod), a Secret volume a directory of its own written from
// sources, the Secrets as read when the pod starts; other kinds of volume (the service account's
// token, say) are not mounted. It returns the directory of each volume by name, and the Secret
// volumes. A Secret volume whose Secret or key is missing, and not optional, is a configError, as
// the kubelet's mount fails and the pod waits.
func (b *sandbox) volumesOf(pod *corev1.Pod, sources envSources) (map[string]string, []*secretVolume, error) {
	dirs := map[string]string{}
	var secrets []*secretVolume
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.EmptyDir != nil:
			dirs[v.Name] = b.dataDir()
		case v.Secret != nil:
			s := &secretVolume{name: v.Name, secret: v.Secret.SecretName, items: v.Secret.Items,
				optional: v.Secret.Optional != nil && *v.Secret.Optional, defaultMode: corev1.SecretVolumeSourceDefaultMode,
				dir: filepath.Join(b.dir, "volumes", v.Name)}
			if v.Secret.DefaultMode != nil {
				s.defaultMode = *v.Secret.DefaultMode
			}
			data, found := sources["Secret/"+s.secret]
			if err := s.write(data, found); err != nil {
				return nil, nil, err
			}
			dirs[v.Name], secrets = s.dir, append(secrets, s)
		}
	}
	return dirs, secrets, nil
}

// files are the volume's files, by path, and their modes, given the Secret's data; an error if
// the Secret, or a key an item names, is missing and the volume is not optional.
func (s *secretVolume) files(data map[string]string, found bool) (map[string]string, map[string]os.FileMode, error) {
	if !found && !s.optional {
		return nil, nil, configError(fmt.Sprintf("MountVolume.SetUp failed for volume %q: secret %q not found", s.name, s.secret))
	}
	files, modes := map[string]string{}, map[string]os.FileMode{}
	if len(s.items) == 0 {
		for key, value := range data {
			files[key], modes[key] = value, os.FileMode(s.defaultMode)
		}
		return files, modes, nil
	}
	for _, item := range s.items {
		value, ok := data[item.Key]
		if !ok {
			if s.optional {
				continue
			}
			return nil, nil, configError(fmt.Sprintf("MountVolume.SetUp failed for volume %q: references non-existent secret key: %s", s.name, item.Key))
		}
		mode := s.defaultMode
		if item.Mode != nil {
			mode = *item.Mode
		}
		files[item.Path], modes[item.Path] = value, os.FileMode(mode)
	}
	return files, modes, nil
}

// write makes the volume's files hold data, as the kubelet's atomic writer does: the files go
// into a new directory, a symbolic link ..data is switched to it in one rename, and each file's
// name is a link through ..data, so that a reader sees the old files or the new ones, never a
// mix. Files that already hold data are left alone.
func (s *secretVolume) write(data map[string]string, found bool) error {
	files, modes, err := s.files(data, found)
	if err != nil || maps.Equal(files, s.written) {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	version, err := os.MkdirTemp(s.dir, ".."+time.Now().Format("2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	for path, value := range files {
		file := filepath.Join(version, path)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(file, []byte(value), modes[path]); err != nil {
			return err
		}
	}
	link := filepath.Join(s.dir, "..data")
	previous, _ := os.Readlink(link)
	_ = os.Remove(link + "_tmp") // left by a write that failed half-way
	if err := os.Symlink(filepath.Base(version), link+"_tmp"); err != nil {
		return err
	}
	if err := os.Rename(link+"_tmp", link); err != nil {
		return err
	}
	for path := range files {
		top, _, _ := strings.Cut(path, "/")
		if _, err := os.Lstat(filepath.Join(s.dir, top)); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", top), filepath.Join(s.dir, top)); err != nil {
				return err
			}
		}
	}
	if previous != "" {
		_ = os.RemoveAll(filepath.Join(s.dir, previous))
	}
	s.written = files
	return nil
}

// syncSecretVolumes brings every running pod's Secret volumes up to date with their Secrets
// every secretVolumeSync, until ctx is done. A Secret that cannot be read, or is gone, leaves
// the files as they are, as the kubelet does.
func (r *Runner) syncSecretVolumes(ctx context.Context) {
	tick := time.NewTicker(secretVolumeSync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		type pending struct {
			namespace string
			volume    *secretVolume
		}
		var volumes []pending
		r.mu.Lock()
		for _, b := range r.pods {
			if !b.terminating {
				for _, v := range b.secrets {
					volumes = append(volumes, pending{b.pod.Namespace, v})
				}
			}
		}
		r.mu.Unlock()
		for _, p := range volumes {
			data, err := r.read(ctx, p.namespace, "Secret", p.volume.secret)
			if err != nil {
				continue
			}
			if err := p.volume.write(data, true); err != nil {
				r.Log.Info("Could not update a Secret volume", "namespace", p.namespace, "volume", p.volume.name, "error", err.Error())
			}
		}
	}
}

// mountsOf are where the container sees its volumes, and the directories here that stand for
// them, longest path first, so that a mount under another is found before it.
func mountsOf(c *corev1.Container, dirs map[string]string) []mount {
	var mounts []mount
	for _, m := range c.VolumeMounts {
		if dir, ok := dirs[m.Name]; ok {
			mounts = append(mounts, mount{path: filepath.Clean(m.MountPath), dir: dir})
		}
	}
	slices.SortFunc(mounts, func(a, b mount) int { return len(b.path) - len(a.path) })
	return mounts
}

// onHostPaths is argv with each path under one of the container's mounts, as a whole argument or
// inside one (a flag's value, a URL, a shell script), moved to the directory that stands for the
// volume here, in one pass: a path moved is not looked at again.
func onHostPaths(argv []string, mounts []mount) []string {
	if len(mounts) == 0 {
		return argv
	}
	var pairs []string
	for _, m := range mounts {
		pairs = append(pairs, m.path+"/", m.dir+"/")
	}
	replacer := strings.NewReplacer(pairs...)
	out := make([]string, len(argv))
	for i, arg := range argv {
		if j := slices.IndexFunc(mounts, func(m mount) bool { return m.path == arg }); j >= 0 {
			out[i] = mounts[j].dir
		} else {
			out[i] = replacer.Replace(arg)
		}
	}
	return out
}
