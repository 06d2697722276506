package testenv

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// S3 is an S3-compatible server a test started: versitygw over a directory of its own.
type S3 struct {
	// Endpoint is the server's host:port, plain HTTP.
	Endpoint string
	// AccessKey and SecretKey are the credentials of its root account.
	AccessKey, SecretKey string
	// Dir is the directory it keeps the buckets in, one directory per bucket.
	Dir string
}

// StartS3 starts the toolchain's versitygw (hack/toolchain.sh versitygw) on ip:port, with a
// posix backend in a directory of the test's own, and waits until it accepts connections. It is
// killed when the test ends.
func StartS3(t testing.TB, ip string, port int) *S3 {
	t.Helper()
	s := &S3{Endpoint: net.JoinHostPort(ip, strconv.Itoa(port)), AccessKey: "cache-operator-test",
		SecretKey: "the-secret-of-the-test-bucket", Dir: t.TempDir()}
	log, err := os.Create(filepath.Join(t.TempDir(), "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(BinDir(), "versitygw"), "--port", s.Endpoint,
		"--access", s.AccessKey, "--secret", s.SecretKey, "posix", s.Dir)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting versitygw: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = log.Close(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	WaitFor(t, 30*time.Second, "versitygw on "+s.Endpoint+" to accept connections", func() (bool, string) {
		select {
		case <-exited:
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("versitygw on %s exited:\n%s", s.Endpoint, b)
		default:
		}
		conn, err := net.DialTimeout("tcp", s.Endpoint, time.Second)
		if err != nil {
			return false, err.Error()
		}
		_ = conn.Close()
		return true, ""
	})
	return s
}
