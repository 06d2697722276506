package valkey

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// A reply of Valkey 8 mid-migration: a primary moving slot 5461 to another, a replica, a node
// still in handshake and one whose address the asked node has not learnt.
const clusterNodes = `07c37dfeb235213a872192d90877d0cd55635b91 127.64.0.1:6379@16379 myself,master - 0 0 1 connected 0-5460 [5461->-e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca]
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.64.0.2:6379@16379 master - 0 1426238316232 2 connected 5462-10922 [5461-<-07c37dfeb235213a872192d90877d0cd55635b91]
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.64.0.3:6379@16379,node-3 slave 07c37dfeb235213a872192d90877d0cd55635b91 0 1426238318243 1 connected
6ec23923021cf3ffec47632106199cb7f496ce01 127.64.0.4:6379@16379 handshake - 1426238316232 0 0 disconnected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 :0@0 master,fail?,noaddr - 1426238316232 1426238315231 3 disconnected 10923 10924-16383
`

func TestParseClusterNodes(t *testing.T) {
	got, err := ParseClusterNodes(clusterNodes)
	if err != nil {
		t.Fatal(err)
	}
	want := []ClusterNode{{
		ID: "07c37dfeb235213a872192d90877d0cd55635b91", IP: "127.64.0.1", Port: 6379, Myself: true, Primary: true, Connected: true,
		Slots:     []SlotRange{{0, 5460}},
		Migrating: map[int]string{5461: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca"},
	}, {
		ID: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca", IP: "127.64.0.2", Port: 6379, Primary: true, Connected: true,
		Slots:     []SlotRange{{5462, 10922}},
		Importing: map[int]string{5461: "07c37dfeb235213a872192d90877d0cd55635b91"},
	}, {
		ID: "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f", IP: "127.64.0.3", Port: 6379, Connected: true,
		PrimaryID: "07c37dfeb235213a872192d90877d0cd55635b91",
	}, {
		ID: "6ec23923021cf3ffec47632106199cb7f496ce01", IP: "127.64.0.4", Port: 6379, Handshake: true,
	}, {
		ID: "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1", Primary: true, Suspected: true,
		Slots: []SlotRange{{10923, 10923}, {10924, 16383}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", got, want)
	}
	if me, ok := Myself(got); !ok || me.SlotsServed() != 5461 {
		t.Errorf("myself serves %d slots (found: %v), want 5461", me.SlotsServed(), ok)
	}
}

// Valkey prints a node's IPv6 address without brackets, the port after its last colon.
func TestParseClusterNodesReadsIPv6Addresses(t *testing.T) {
	reply := `07c37dfeb235213a872192d90877d0cd55635b91 2001:db8::1:6379@16379 myself,master - 0 0 1 connected 0-16383
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f fd00:0:0:1::2:6380@16380,node-2 slave 07c37dfeb235213a872192d90877d0cd55635b91 0 1426238318243 1 connected
6ec23923021cf3ffec47632106199cb7f496ce01 [fd00::3]:6379@16379 slave 07c37dfeb235213a872192d90877d0cd55635b91 0 1426238318243 1 connected
`
	got, err := ParseClusterNodes(reply)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, n := range got {
		addrs = append(addrs, fmt.Sprintf("%s port %d", n.IP, n.Port))
	}
	if want := []string{"2001:db8::1 port 6379", "fd00:0:0:1::2 port 6380", "fd00::3 port 6379"}; !slices.Equal(addrs, want) {
		t.Errorf("addresses %q, want %q", addrs, want)
	}
}

func TestParseClusterNodesRefusesWhatItCannotRead(t *testing.T) {
	for _, reply := range []string{
		"07c37dfe 127.64.0.1:6379@16379 myself,master - 0 0",                         // too few fields
		"07c37dfe 127.64.0.1:6379@16379 master - 0 0 1 connected 0-16384",            // past the last slot
		"07c37dfe 127.64.0.1:6379@16379 master - 0 0 1 connected 10-5",               // backwards
		"07c37dfe 127.64.0.1:6379@16379 master - 0 0 1 connected [5461]",             // neither way
		"07c37dfe 127.64.0.1:6379@16379 master - 0 0 1 connected [99999->-e7d1eecc]", // past the last slot
	} {
		if _, err := ParseClusterNodes(reply); err == nil {
			t.Errorf("%q parsed without an error", reply)
		}
	}
}

// Slot ranges read back as written; anything but slots and ranges is refused.
func TestSlotsReadBackAsWritten(t *testing.T) {
	ranges := []SlotRange{{0, 5460}, {5462, 5462}, {16000, 16383}}
	if got, err := ParseSlots(FormatSlots(ranges)); err != nil || !slices.Equal(got, ranges) {
		t.Errorf("%q reads back as %v, %v", FormatSlots(ranges), got, err)
	}
	for _, bad := range []string{"0-16384", "5-3", "[5->-abc]", "x"} {
		if _, err := ParseSlots(bad); err == nil {
			t.Errorf("%q was read", bad)
		}
	}
}
