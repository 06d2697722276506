package snapshot

import (
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
