package testenv

import (
	"fmt"
	"os"
	"strings"
)

// MemoryMiB reads sizes from /proc/PID/status (VmRSS, VmHWM, RssAnon, ...) in MiB: what a
// measurement reports of a process's memory. It fails once the process has exited.
func MemoryMiB(pid int, fields ...string) (map[string]float64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	sizes := map[string]float64{}
	for line := range strings.Lines(string(status)) {
		field, value, _ := strings.Cut(line, ":")
		if !strings.Contains(" "+strings.Join(fields, " ")+" ", " "+field+" ") {
			continue
		}
		var kib float64
		if _, err := fmt.Sscanf(strings.TrimSpace(value), "%g kB", &kib); err != nil {
			return nil, fmt.Errorf("/proc/%d/status: %s: %w", pid, field, err)
		}
		sizes[field] = kib / 1024
	}
	return sizes, nil
}
