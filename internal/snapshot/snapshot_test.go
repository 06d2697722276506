package snapshot

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// A diskless transfer's RDB ends with the mark, however the reads split it: the copy holds the
// mark back and stops there; a stream cut before the mark is an error.
func TestCopyUntilMarkStopsAtTheMarkWhateverTheReads(t *testing.T) {
	mark := strings.Repeat("m", eofMarkLength)
	rdb := "REDIS0011" + strings.Repeat("data", 50_000)
	for name, r := range map[string]func() io.Reader{
		"whole":     func() io.Reader { return strings.NewReader(rdb + mark) },
		"bytewise":  func() io.Reader { return iotest.OneByteReader(strings.NewReader(rdb + mark)) },
		"halves":    func() io.Reader { return iotest.HalfReader(strings.NewReader(rdb + mark)) },
		"mark last": func() io.Reader { return io.MultiReader(strings.NewReader(rdb), strings.NewReader(mark)) },
	} {
		var out bytes.Buffer
		n, err := copyUntilMark(&out, r(), []byte(mark))
		if err != nil || n != int64(len(rdb)) || out.String() != rdb {
			t.Errorf("%s: copied %d bytes, %v; want the %d bytes before the mark", name, n, err, len(rdb))
		}
	}
	if _, err := copyUntilMark(io.Discard, strings.NewReader(rdb), []byte(mark)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a stream cut before its mark gave %v, want io.ErrUnexpectedEOF", err)
	}
}

// ReadHead finds the format and the first database's size past the header's fields, whatever
// their strings' encodings; an RDB with no database holds no key; one that is not an RDB is
// refused.
func TestReadHeadReadsTheFormatAndTheFirstDatabasesSize(t *testing.T) {
	header := "REDIS0011" +
		"\xFA" + "\x0Avalkey-ver" + "\x058.0.1" + // a plain string key and value
		"\xFA" + "\x0Aredis-bits" + "\xC0\x40" + // an 8-bit integer
		"\xFA" + "\x05ctime" + "\xC2\x01\x02\x03\x04" + // a 32-bit integer
		"\xFA" + "\x08aof-base" + "\xC3\x03\x05" + "abc" + // LZF: 3 bytes that make 5
		"\xF5" + "\x40\x05" + "#!lua" // a function library, with a 14-bit length
	for name, c := range map[string]struct {
		rdb      string
		format   int
		db       int
		keys     int64
		failsFor bool
	}{
		"db 0, 6-bit size":     {rdb: header + "\xFE\x00" + "\xFB\x05\x02" + "\x00\x01k\x01v", format: 11, keys: 5},
		"db 3, 32-bit size":    {rdb: header + "\xFE\x03" + "\xFB\x80\x00\x03\x0D\x40\x00", format: 11, db: 3, keys: 200_000},
		"no database":          {rdb: header + "\xFF" + "checksum", format: 11},
		"Valkey 9's magic":     {rdb: "VALKEY080" + header[9:] + "\xFE\x00" + "\xFB\x05\x02", format: 80, keys: 5},
		"a magic's bad digits": {rdb: "VALKEY08x" + header[9:] + "\xFF", failsFor: true},
		"not an RDB":           {rdb: "HTTP/1.1 200 OK", failsFor: true},
		"a key before a size":  {rdb: header + "\xFE\x00" + "\x00\x01k\x01v", failsFor: true},
		"cut in the header":    {rdb: header[:20], failsFor: true},
		"a size before any db": {rdb: header + "\xFB\x05\x02", failsFor: true},
	} {
		h, err := ReadHead(bufio.NewReader(strings.NewReader(c.rdb)))
		if c.failsFor != (err != nil) || h.Format != c.format || h.DB != c.db || h.Keys != c.keys {
			t.Errorf("%s: format %d, database %d, %d keys, %v; want %d, %d, %d, failing: %v", name, h.Format, h.DB, h.Keys, err, c.format, c.db, c.keys, c.failsFor)
		}
	}
}
