package realnode

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// InotifyInstancesPerNode is how many inotify instances a running node holds: its kubelet 6 (the
// cgroups cAdvisor watches, its certificates, its plugin directories), its containerd 2, its
// kube-proxy 1. The kernel gives each user at most fs.inotify.max_user_instances of them, 128 by
// default, for every process of the user together: a node that finds none left fails to start
// its kubelet ("inotify_init: too many open files") and never registers.
const InotifyInstancesPerNode = 9

const maxUserInstances = "/proc/sys/fs/inotify/max_user_instances"

// CheckInotifyRoom fails, saying why, when starting that many more nodes would take more inotify
// instances than the user has left: the machine's limit is its own configuration, which the
// local cluster leaves as it is. A check, not a reservation: processes started meanwhile take
// their share too.
func CheckInotifyRoom(nodes int) error {
	raw, err := os.ReadFile(maxUserInstances)
	if err != nil {
		return nil // no such limit to check here
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil
	}
	used := inotifyInstancesOf(os.Getuid())
	if need := nodes * InotifyInstancesPerNode; used+need > limit {
		return fmt.Errorf("%d real nodes take about %d inotify instances, and the machine allows %d per user (%s), of which %d are in use: "+
			"stop another local cluster on this machine (make local-cluster-down; an end-to-end run) first", nodes, need, limit, maxUserInstances, used)
	}
	return nil
}

// inotifyInstancesOf counts the inotify instances that the user's processes hold open.
func inotifyInstancesOf(uid int) int {
	procs, _ := filepath.Glob("/proc/[0-9]*") // the pattern is well formed: no error
	count := 0
	for _, proc := range procs {
		if owner, ok := realUID(proc); !ok || owner != uid {
			continue
		}
		count += inotifyInstancesIn(proc)
	}
	return count
}

// inotifyInstancesIn counts the inotify instances of the process whose /proc directory is given;
// 0 for one gone, or not ours to read.
func inotifyInstancesIn(proc string) int {
	fds, err := os.ReadDir(filepath.Join(proc, "fd"))
	if err != nil {
		return 0
	}
	count := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(proc, "fd", fd.Name())); err == nil && target == "anon_inode:inotify" {
			count++
		}
	}
	return count
}

// realUID is the real user ID of the process whose /proc directory is given.
func realUID(proc string) (int, bool) {
	f, err := os.Open(filepath.Join(proc, "status"))
	if err != nil {
		return 0, false
	}
	defer f.Close() //nolint:errcheck
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		if fields := strings.Fields(lines.Text()); len(fields) > 1 && fields[0] == "Uid:" {
			uid, err := strconv.Atoi(fields[1])
			return uid, err == nil
		}
	}
	return 0, false
}
