package testenv

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Etcd is a real etcd process of the toolchain, on loopback ports of its own, that a test can
// stop and start again with its data kept.
type Etcd struct {
	// Endpoint is the client URL.
	Endpoint string
	peerURL  string
	dataDir  string
	cmd      *exec.Cmd
	done     chan struct{}
	// secure: TLS and authentication (StartSecureEtcd), and the administrator's credentials.
	secure *SecureEtcd
}

// StartEtcd starts an etcd that the test stops when it ends.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	e := &Etcd{
		Endpoint: "http://" + FreeAddr(t),
		peerURL:  "http://" + FreeAddr(t),
		dataDir:  filepath.Join(t.TempDir(), "data"),
	}
	e.Start(t)
	t.Cleanup(func() { e.Stop(t) })
	return e
}

// Start starts etcd, or starts it again after Stop, and waits until it serves.
func (e *Etcd) Start(t testing.TB) {
	t.Helper()
	if e.cmd != nil {
		t.Fatal("etcd is already running")
	}
	e.cmd = exec.Command(filepath.Join(BinDir(), "etcd"),
		"--name", "catalog",
		"--data-dir", e.dataDir,
		"--listen-client-urls", e.Endpoint, "--advertise-client-urls", e.Endpoint,
		"--listen-peer-urls", e.peerURL, "--initial-advertise-peer-urls", e.peerURL,
		"--initial-cluster", "catalog="+e.peerURL,
		"--log-level", "error")
	if e.secure != nil {
		e.cmd.Args = append(e.cmd.Args, "--cert-file", e.secure.serverCert, "--key-file", e.secure.serverKey,
			"--client-cert-auth", "--trusted-ca-file", e.secure.CAFile)
	}
	e.cmd.Stdout, e.cmd.Stderr = os.Stderr, os.Stderr
	if err := e.cmd.Start(); err != nil {
		t.Fatalf("starting etcd (run `make tools` first?): %v", err)
	}
	e.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(e.cmd, e.done)

	c := e.Client(t)
	defer c.Close() //nolint:errcheck
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			select {
			case <-e.done:
				return false, fmt.Errorf("etcd exited at start (see its log above)")
			default:
			}
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := c.Get(ctx, "health")
			return err == nil, nil
		})
	if err != nil {
		t.Fatalf("etcd at %s did not start serving: %v", e.Endpoint, err)
	}
}

// Stop stops etcd and waits until it has exited.
func (e *Etcd) Stop(t testing.TB) {
	t.Helper()
	if e.cmd == nil {
		return
	}
	_ = e.cmd.Process.Kill()
	<-e.done
	e.cmd = nil
}

// PID is the running etcd's process ID.
func (e *Etcd) PID() int { return e.cmd.Process.Pid }

// Client is a new client of this etcd, closed by the caller: of a secure one, its administrator.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if e.secure != nil {
		tlsConfig, err := transport.TLSInfo{TrustedCAFile: e.secure.CAFile, CertFile: e.secure.adminCert, KeyFile: e.secure.adminKey}.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS, cfg.Username, cfg.Password = tlsConfig, "root", e.secure.adminPassword
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// SecureEtcd is an etcd that asks of its clients what a production catalogue would: TLS, with a
// client certificate from its CA, and a user and password, the catalogue's user holding a role
// that covers only the catalogue's prefix.
type SecureEtcd struct {
	*Etcd
	// The files the catalogue's client is given: the CA, its certificate and key, its user's
	// name and password.
	CAFile, CertFile, KeyFile, UsernameFile, PasswordFile string

	serverCert, serverKey, adminCert, adminKey, adminPassword string
}

// StartSecureEtcd starts an etcd that requires TLS with client certificates and authentication,
// with a user of the given name whose role may read and write only under prefix. The test
// stops it when it ends.
func StartSecureEtcd(t testing.TB, user, prefix string) *SecureEtcd {
	t.Helper()
	ca := NewCA(t, "catalogue-ca")
	addr, peer := FreeAddr(t), FreeAddr(t)
	host, _, _ := net.SplitHostPort(addr)
	s := &SecureEtcd{CAFile: ca.CertFile, adminPassword: "root-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	s.serverCert, s.serverKey = ca.Issue(t, "etcd", []string{host}, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	s.adminCert, s.adminKey = ca.Issue(t, "root", nil, x509.ExtKeyUsageClientAuth)
	s.CertFile, s.KeyFile = ca.Issue(t, user, nil, x509.ExtKeyUsageClientAuth)
	s.Etcd = &Etcd{Endpoint: "https://" + addr, peerURL: "http://" + peer, dataDir: filepath.Join(t.TempDir(), "data"), secure: s}
	dir := t.TempDir()
	s.UsernameFile, s.PasswordFile = filepath.Join(dir, "username"), filepath.Join(dir, "password")
	password := user + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for file, value := range map[string]string{s.UsernameFile: user, s.PasswordFile: password} {
		if err := os.WriteFile(file, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// Users and roles are made before authentication is on: root first, as etcd requires.
	s.Start(t)
	t.Cleanup(func() { s.Stop(t) })
	c := s.Client(t)
	defer c.Close() //nolint:errcheck
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", s.adminPassword); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "catalog"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "catalog", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, user, password); return err },
		func() error { _, err := c.UserGrantRole(ctx, user, "catalog"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("setting up etcd's authentication: %v", err)
		}
	}
	return s
}

// KeyValues lists every key and value stored under prefix.
func KeyValues(t testing.TB, c *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("reading %s from etcd: %v", prefix, err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}
