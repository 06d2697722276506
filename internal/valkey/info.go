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
