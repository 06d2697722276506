package valkey

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// SlotCount is the number of hash slots of a Valkey Cluster.
const SlotCount = 16384

// SlotRange is the slots from Start to End, both included.
type SlotRange struct{ Start, End int }

// Len is the number of slots in the range.
func (r SlotRange) Len() int { return r.End - r.Start + 1 }

func (r SlotRange) String() string {
	if r.Start == r.End {
		return strconv.Itoa(r.Start)
	}
	return fmt.Sprintf("%d-%d", r.Start, r.End)
}

// ClusterNode is one line of CLUSTER NODES: a node of the cluster as the node asked sees it.
type ClusterNode struct {
	ID string
	// IP and Port are where clients reach the node; empty for a node whose address the asked
	// node has not learnt (flag noaddr).
	IP   string
	Port int
	// Myself marks the node that was asked.
	Myself bool
	// Primary is set for a primary (flag master), and PrimaryID for a replica (flag slave).
	Primary   bool
	PrimaryID string
	// Failing is set when the cluster agreed that the node fails (flag fail); Suspected when
	// only the asked node cannot reach it (flag fail?).
	Failing, Suspected bool
	// Handshake is set while the asked node has met the node but not completed the handshake.
	Handshake bool
	// Connected reports whether the asked node's cluster bus link to the node is up.
	Connected bool
	// Slots are the slots the node serves. Migrating and Importing map a slot in migration to
	// the ID of the node it moves to or from.
	Slots     []SlotRange
	Migrating map[int]string
	Importing map[int]string
}

// SlotsServed is the number of slots the node serves.
func (n *ClusterNode) SlotsServed() int { return CountSlots(n.Slots) }

// CountSlots is the number of slots in the ranges.
func CountSlots(ranges []SlotRange) int {
	total := 0
	for _, r := range ranges {
		total += r.Len()
	}
	return total
}

// ParseClusterNodes parses the reply of CLUSTER NODES.
func ParseClusterNodes(reply string) ([]ClusterNode, error) {
	var nodes []ClusterNode
	for line := range strings.Lines(reply) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		n, err := parseClusterNode(line)
		if err != nil {
			return nil, fmt.Errorf("CLUSTER NODES line %q: %w", line, err)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// parseClusterNode parses <id> <ip:port@cport[,hostname]> <flags> <primary> <ping-sent>
// <pong-recv> <config-epoch> <link-state> <slot>...
func parseClusterNode(line string) (ClusterNode, error) {
	f := strings.Fields(line)
	if len(f) < 8 {
		return ClusterNode{}, fmt.Errorf("%d fields, want at least 8", len(f))
	}
	n := ClusterNode{ID: f[0], Connected: f[7] == "connected"}
	addr, _, _ := strings.Cut(f[1], "@")
	if host, port := splitNodeAddress(addr); host != "" {
		n.IP = host
		var err error
		if n.Port, err = strconv.Atoi(port); err != nil {
			return ClusterNode{}, fmt.Errorf("port %q: %w", port, err)
		}
	}
	for _, flag := range strings.Split(f[2], ",") {
		switch flag {
		case "myself":
			n.Myself = true
		case "master":
			n.Primary = true
		case "fail":
			n.Failing = true
		case "fail?":
			n.Suspected = true
		case "handshake":
			n.Handshake = true
		case "noaddr":
			n.IP, n.Port = "", 0
		}
	}
	if f[3] != "-" {
		n.PrimaryID = f[3]
	}
	for _, slot := range f[8:] {
		if err := n.addSlot(slot); err != nil {
			return ClusterNode{}, err
		}
	}
	return n, nil
}

// splitNodeAddress splits a node's address as CLUSTER NODES prints it, ip:port, into its host
// and port. Valkey prints an IPv6 address without brackets (2001:db8::1:6379), which
// net.SplitHostPort refuses, so the port is what follows the last colon; a bracketed address is
// taken too. A node whose address is not known yet prints ":0" or ":port": no host.
func splitNodeAddress(addr string) (host, port string) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", ""
	}
	return strings.TrimSuffix(strings.TrimPrefix(addr[:i], "["), "]"), addr[i+1:]
}

// addSlot adds one slot field: "N", "N-M", "[N->-ID]" (migrating to ID) or "[N-<-ID]"
// (importing from ID).
func (n *ClusterNode) addSlot(field string) error {
	if inner, ok := strings.CutPrefix(field, "["); ok {
		inner = strings.TrimSuffix(inner, "]")
		for _, way := range []struct {
			sep   string
			slots *map[int]string
		}{{"->-", &n.Migrating}, {"-<-", &n.Importing}} {
			if slot, peer, ok := strings.Cut(inner, way.sep); ok {
				s, err := parseSlot(slot)
				if err != nil {
					return fmt.Errorf("slot %q: %w", field, err)
				}
				if *way.slots == nil {
					*way.slots = map[int]string{}
				}
				(*way.slots)[s] = peer
				return nil
			}
		}
		return fmt.Errorf("slot %q: neither migrating nor importing", field)
	}
	start, end, isRange := strings.Cut(field, "-")
	r := SlotRange{}
	var err error
	if r.Start, err = strconv.Atoi(start); err != nil {
		return fmt.Errorf("slot %q: %w", field, err)
	}
	r.End = r.Start
	if isRange {
		if r.End, err = strconv.Atoi(end); err != nil {
			return fmt.Errorf("slot %q: %w", field, err)
		}
	}
	if r.Start < 0 || r.End >= SlotCount || r.End < r.Start {
		return fmt.Errorf("slot range %q out of 0-%d", field, SlotCount-1)
	}
	n.Slots = append(n.Slots, r)
	return nil
}

func parseSlot(s string) (int, error) {
	slot, err := strconv.Atoi(s)
	if err == nil && (slot < 0 || slot >= SlotCount) {
		err = fmt.Errorf("out of 0-%d", SlotCount-1)
	}
	return slot, err
}

// Myself is the entry of the node that was asked, if any.
func Myself(nodes []ClusterNode) (ClusterNode, bool) {
	i := slices.IndexFunc(nodes, func(n ClusterNode) bool { return n.Myself })
	if i < 0 {
		return ClusterNode{}, false
	}
	return nodes[i], true
}

// FormatSlots writes slot ranges as CLUSTER NODES does, comma-separated: "0-5460,5462".
func FormatSlots(ranges []SlotRange) string {
	parts := make([]string, len(ranges))
	for i, r := range ranges {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// ParseSlots reads what FormatSlots writes.
func ParseSlots(s string) ([]SlotRange, error) {
	var n ClusterNode
	if s == "" {
		return nil, nil
	}
	for field := range strings.SplitSeq(s, ",") {
		if strings.HasPrefix(field, "[") {
			return nil, fmt.Errorf("slot %q: not a slot or a range", field)
		}
		if err := n.addSlot(field); err != nil {
			return nil, err
		}
	}
	return n.Slots, nil
}
