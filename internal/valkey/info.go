package valkey

import "strings"

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
