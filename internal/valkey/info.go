package valkey

import (
	"slices"
	"strconv"
	"strings"
)

// InfoField is the value of one field of an INFO or CLUSTER INFO reply ("field:value" lines),
// or "" when the reply has no such field.
func InfoField(reply, field string) string {
	for line := range strings.Lines(reply) {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return value
		}
	}
	return ""
}

// versionOf is the Valkey release that INFO server's reply names: valkey_version, or
// redis_version before Valkey 7.2.5, which says only that.
func versionOf(reply string) string {
	if v := InfoField(reply, "valkey_version"); v != "" {
		return v
	}
	return InfoField(reply, "redis_version")
}

// RDBFormat is the version of the RDB format that the Valkey release writes, and the newest it
// reads: 80 from Valkey 9.0 on (its files start "VALKEY080"), 11 before, as Redis 7.2's. A
// server of an older format cannot load a newer one's snapshot, nor sync as its replica from
// a primary whose data needs the newer format.
func RDBFormat(version string) int {
	if OlderVersion(version, "9.0.0") {
		return 11
	}
	return 80
}

// FailsOverOnShutdown reports whether a Cluster primary of the Valkey release, stopped by SIGTERM,
// can hand its shard over to a replica itself (shutdown-on-sigterm failover, which came with 9.0):
// it pauses its writes, waits for a replica to catch up, tells it to take over, then exits.
func FailsOverOnShutdown(version string) bool {
	return version != "" && !OlderVersion(version, "9.0.0")
}

// OlderVersion reports whether MAJOR.MINOR.PATCH version a is older than b.
func OlderVersion(a, b string) bool {
	parse := func(v string) []int {
		var parts []int
		for p := range strings.SplitSeq(v, ".") {
			n, _ := strconv.Atoi(p)
			parts = append(parts, n)
		}
		return parts
	}
	return slices.Compare(parse(a), parse(b)) < 0
}
