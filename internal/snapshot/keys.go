package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The RDB opcodes that may come before a database's first key (Valkey's rdb.h).
const (
	opFunction = 0xF5 // a library of functions: a string
	opAux      = 0xFA // a field of the header: a key and a value, both strings
	opResizeDB = 0xFB // the sizes of the database that follows: its keys, then its keys with a TTL
	opSelectDB = 0xFE // the database whose keys follow
	opEOF      = 0xFF
)

// ErrNoKeyCount is returned by Keys for an RDB whose first database does not start with its
// size, which a server writes for every database it saves.
var ErrNoKeyCount = errors.New("the RDB does not say how many keys its first database holds")

// Keys reads the head of an RDB, up to its first database's size, and returns that database's
// number and how many keys it holds, as the server counted them when it wrote the file (a Cluster
// node has database 0 only). An RDB with no key at all has no database: Keys returns 0, 0. It
// reads no further than the first database's size: the rest is left in r.
func Keys(r *bufio.Reader) (db int, keys int64, err error) {
	magic := make([]byte, 9)
	if _, err := io.ReadFull(r, magic); err != nil {
		return 0, 0, fmt.Errorf("reading the RDB's header: %w", err)
	}
	if string(magic[:5]) != "REDIS" && string(magic[:6]) != "VALKEY" {
		return 0, 0, fmt.Errorf("not an RDB: it starts with %q", magic)
	}
	db = -1
	for {
		op, err := r.ReadByte()
		if err != nil {
			return 0, 0, fmt.Errorf("reading the RDB's header: %w", err)
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
				return 0, 0, ErrNoKeyCount
			}
			var n uint64
			n, _, err = readLength(r)
			return db, int64(n), err
		case opEOF:
			return 0, 0, nil
		default:
			return 0, 0, fmt.Errorf("%w (opcode %#x before it)", ErrNoKeyCount, op)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("reading the RDB's header: %w", err)
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
