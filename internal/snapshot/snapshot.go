// Package snapshot takes a copy of a Valkey server's data, as an RDB file, over the replication
// protocol: it asks for what a new replica's first sync gets (SYNC, with the replica's
// capabilities for a stream that ends in a mark and for the RDB alone), and streams it to a
// writer. So a backup needs no exec into the server's pod and no file on its disk, memory stays
// flat whatever the size, and a server that stops sending is given up on rather than waited for.
// The server forks to write the RDB, as for any replica: taken from a replica, the primary keeps
// serving undisturbed.
package snapshot

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// DefaultStall is how long a snapshot waits for the next byte before it gives up. While it forks
// and starts writing, the server sends a newline every second, as it does while it waits
// repl-diskless-sync-delay for more replicas before a diskless transfer starts (5 s by default; the
// operator's servers do not wait).
const DefaultStall = 30 * time.Second

// Source is a server to take a snapshot of.
type Source struct {
	// Addr is the server's host:port.
	Addr string
	// Stall, if set, replaces DefaultStall.
	Stall time.Duration
	// User and Password, if User is set, are who the snapshot is taken as: a user allowed SYNC
	// and REPLCONF.
	User, Password string
	// TLS, if set, is how the snapshot speaks TLS to the server.
	TLS *tls.Config
	// Version, if set, is the Valkey version the snapshot announces, as a replica of that version
	// does (REPLCONF version): a server writes a replica's snapshot in the RDB format of the
	// version it announces, RDB 11 for one that announces none (Valkey 9's 80 is what 8.x cannot
	// load), and fails it when its data needs a newer format (a hash with expiring fields, 9.0). A
	// backup announces the servers' own version, so that its snapshots hold whatever the servers
	// hold.
	Version string
}

// eofMarkLength is the length of the mark that ends a diskless transfer.
const eofMarkLength = 40

// Take streams the server's RDB into w, and returns how many bytes it wrote. It returns an error,
// with what it has written so far, if the server refuses, the connection breaks, nothing comes
// for the stall time, or ctx ends; what it wrote then is not a whole RDB.
func (s Source) Take(ctx context.Context, w io.Writer) (int64, error) {
	stall := s.Stall
	if stall == 0 {
		stall = DefaultStall
	}
	var dialer interface {
		DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	} = &net.Dialer{}
	if s.TLS != nil {
		dialer = &tls.Dialer{Config: s.TLS}
	}
	conn, err := dialer.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return 0, fmt.Errorf("connecting to %s for a snapshot: %w", s.Addr, err)
	}
	defer conn.Close() //nolint:errcheck // read only; the snapshot's outcome is known by then
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	r := &stallReader{conn: conn, stall: stall}
	in := bufio.NewReaderSize(r, 64<<10)
	cmds := [][]string{{"REPLCONF", "capa", "eof"}, {"REPLCONF", "rdb-only", "1"}}
	if s.Version != "" {
		cmds = append(cmds, []string{"REPLCONF", "version", s.Version})
	}
	if s.User != "" {
		cmds = append([][]string{{"AUTH", s.User, s.Password}}, cmds...)
	}
	for _, cmd := range cmds {
		if err := send(conn, stall, cmd...); err != nil {
			return 0, ctxErr(ctx, err)
		}
		if reply, err := readLine(in); err != nil {
			return 0, replyError(s.Addr, cmd, reply, ctxErr(ctx, err))
		} else if reply != "+OK" {
			return 0, replyError(s.Addr, cmd, reply, nil)
		}
	}
	if err := send(conn, stall, "SYNC"); err != nil {
		return 0, ctxErr(ctx, err)
	}
	header, err := syncHeader(in)
	if err != nil {
		return 0, fmt.Errorf("asking %s for a snapshot: %w", s.Addr, ctxErr(ctx, err))
	}
	var n int64
	if mark, ok := strings.CutPrefix(header, "$EOF:"); ok && len(mark) == eofMarkLength {
		n, err = copyUntilMark(w, in, []byte(mark))
	} else if size, perr := strconv.ParseInt(strings.TrimPrefix(header, "$"), 10, 64); perr == nil && strings.HasPrefix(header, "$") {
		n, err = io.CopyN(w, in, size)
	} else {
		return 0, fmt.Errorf("%s answered SYNC with %q, not an RDB", s.Addr, header)
	}
	if err != nil {
		return n, fmt.Errorf("reading the snapshot of %s after %d bytes: %w", s.Addr, n, ctxErr(ctx, err))
	}
	return n, nil
}

// stallReader reads from the connection with a deadline of the stall time for each read.
type stallReader struct {
	conn  net.Conn
	stall time.Duration
}

func (r *stallReader) Read(p []byte) (int, error) {
	if err := r.conn.SetReadDeadline(time.Now().Add(r.stall)); err != nil {
		return 0, err
	}
	n, err := r.conn.Read(p)
	if timeout := net.Error(nil); errors.As(err, &timeout) && timeout.Timeout() {
		err = fmt.Errorf("the server sent nothing for %s: %w", r.stall, err)
	}
	return n, err
}

// send writes one command in RESP.
func send(conn net.Conn, timeout time.Duration, args ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	_, err := io.WriteString(conn, b.String())
	return err
}

func readLine(in *bufio.Reader) (string, error) {
	line, err := in.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// syncHeader reads SYNC's reply up to the RDB: the newlines the server sends while it prepares,
// then the header that says how the RDB ends.
func syncHeader(in *bufio.Reader) (string, error) {
	for {
		line, err := readLine(in)
		switch {
		case err != nil:
			return "", err
		case strings.HasPrefix(line, "-"):
			return "", errors.New(strings.TrimPrefix(line, "-"))
		case line != "":
			return line, nil
		}
	}
}

func replyError(addr string, cmd []string, reply string, err error) error {
	what := strings.Join(cmd, " ")
	if cmd[0] == "AUTH" {
		what = "AUTH as " + cmd[1] // never the password: the error goes to logs and status
	}
	if err != nil {
		return fmt.Errorf("%s to %s: %w", what, addr, err)
	}
	return fmt.Errorf("%s to %s: %s", what, addr, strings.TrimPrefix(reply, "-"))
}

// copyUntilMark copies the RDB of a diskless transfer, which ends with the mark: the server sends
// nothing after it until the replica acknowledges, so the mark is the end of the stream so far.
// The last bytes read are held back until more come, so that the mark is never written.
func copyUntilMark(w io.Writer, r io.Reader, mark []byte) (int64, error) {
	buf := make([]byte, 64<<10)
	held := make([]byte, 0, 2*len(buf))
	var written int64
	for {
		n, err := r.Read(buf)
		held = append(held, buf[:n]...)
		if bytes.HasSuffix(held, mark) {
			m, werr := w.Write(held[:len(held)-len(mark)])
			return written + int64(m), werr
		}
		if keep := len(mark); len(held) > keep {
			m, werr := w.Write(held[:len(held)-keep])
			written += int64(m)
			if werr != nil {
				return written, werr
			}
			held = append(held[:0], held[len(held)-keep:]...)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return written, err
		}
	}
}

// ctxErr is ctx's error if it ended, which explains a deadline the context set.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
