package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The RDB opcodes that may come before a database's first key (Valkey's rdb.h).
const (
	opFunction = 0xF5 // a library of functions: a string
	opAux      = 0xFA // a field of the header: a key and a value, both strings
	opResizeDB = 0xFB // the sizes of the database that follows: its keys, then its keys with a TTL
	opSelectDB = 0xFE // the database whose keys follow
	opEOF      = 0xFF
)

// ErrNoKeyCount is returned by ReadHead for an RDB whose first database does not start with its
// size, which a server writes for every database it saves.
var ErrNoKeyCount = errors.New("the RDB does not say how many keys its first database holds")

// Head is what the head of an RDB says, up to its first database's size.
type Head struct {
	// Format is the version of the RDB's format, from its magic: 11 from Valkey 8 ("REDIS0011"),
	// 80 from Valkey 9 ("VALKEY080"). A server loads the formats up to its own only.
	Format int
	// DB is the first database's number, and Keys how many keys it holds, as the server counted
	// them when it wrote the file (a Cluster node has database 0 only). An RDB with no key at all
	// has no database: both are 0.
	DB   int
	Keys int64
}

// ReadHead reads the head of an RDB, up to its first database's size. It reads no further: the
// rest is left in r.
func ReadHead(r *bufio.Reader) (Head, error) {
	magic := make([]byte, 9)
	if _, err := io.ReadFull(r, magic); err != nil {
		return Head{}, fmt.Errorf("reading the RDB's header: %w", err)
	}
	var h Head
	digits, redis := strings.CutPrefix(string(magic), "REDIS")
	digits, valkey := strings.CutPrefix(digits, "VALKEY")
	format, err := strconv.Atoi(digits)
	if !redis && !valkey || err != nil || format < 0 {
		return Head{}, fmt.Errorf("not an RDB: it starts with %q", magic)
	}
	h.Format = format
	db := -1
	for {
		op, err := r.ReadByte()
		if err != nil {
			return Head{}, fmt.Errorf("reading the RDB's header: %w", err)
		}
		switch op {
		case opAux:
			err = skipStrings(r, 2)
		case opFunction:
			err = skipStrings(r, 1)
		case opSelectDB:
			var n uint64
			n, _, err = readLength(r)
			db = int(n)
		case opResizeDB:
			if db < 0 {
				return Head{}, ErrNoKeyCount
			}
			var n uint64
			n, _, err = readLength(r)
			h.DB, h.Keys = db, int64(n)
			return h, err
		case opEOF:
			return h, nil
		default:
			return Head{}, fmt.Errorf("%w (opcode %#x before it)", ErrNoKeyCount, op)
		}
		if err != nil {
			return Head{}, fmt.Errorf("reading the RDB's header: %w", err)
		}
	}
}

// readLength reads an RDB length; special is set when it is instead the encoding of a string
// (an integer or LZF-compressed), which the returned value then names.
func readLength(r *bufio.Reader) (n uint64, special bool, err error) {
	first, err := r.ReadByte()
	if err != nil {
		return 0, false, err
	}
	switch first >> 6 {
	case 0:
		return uint64(first & 0x3F), false, nil
	case 1:
		next, err := r.ReadByte()
		return uint64(first&0x3F)<<8 | uint64(next), false, err
	case 2:
		switch first {
		case 0x80:
			var b [4]byte
			_, err := io.ReadFull(r, b[:])
			return uint64(binary.BigEndian.Uint32(b[:])), false, err
		case 0x81:
			var b [8]byte
			_, err := io.ReadFull(r, b[:])
			return binary.BigEndian.Uint64(b[:]), false, err
		}
		return 0, false, fmt.Errorf("unknown length encoding %#x", first)
	}
	return uint64(first & 0x3F), true, nil
}

// skipStrings reads past n RDB strings.
func skipStrings(r *bufio.Reader, n int) error {
	for range n {
		length, special, err := readLength(r)
		if err != nil {
			return err
		}
		if special {
			switch length {
			case 0, 1, 2: // an integer of 1, 2 or 4 bytes
				length = 1 << length
			case 3: // LZF: the compressed length, the length once uncompressed, the data
				if length, _, err = readLength(r); err == nil {
					_, _, err = readLength(r)
				}
				if err != nil {
					return err
				}
			default:
				return fmt.Errorf("unknown string encoding %d", length)
			}
		}
		if _, err := r.Discard(int(length)); err != nil {
			return err
		}
	}
	return nil
}
