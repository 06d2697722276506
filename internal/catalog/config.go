package catalog

import (
	"fmt"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdConfig says how to reach the catalogue's etcd. Secrets are read from files (mounted from
// a Secret), never taken from flags, so they show neither in the process list nor in logs.
type EtcdConfig struct {
	Endpoints   []string
	DialTimeout time.Duration
	// CAFile verifies the server's certificate; CertFile and KeyFile are the client's own for
	// mutual TLS. Any of them turns TLS on.
	CAFile, CertFile, KeyFile string
	// UsernameFile and PasswordFile hold credentials for etcd's own authentication.
	UsernameFile, PasswordFile string
}

// NewClient connects to etcd. It does not wait for etcd to answer: the operator starts while
// the catalogue is down, and registrations fail and are retried until it is back.
func (c EtcdConfig) NewClient() (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: c.Endpoints, DialTimeout: c.DialTimeout}
	if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" {
		tlsInfo := transport.TLSInfo{TrustedCAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile}
		tlsConfig, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("catalogue TLS: %w", err)
		}
		cfg.TLS = tlsConfig
	}
	var err error
	if cfg.Username, err = readSecret(c.UsernameFile); err != nil {
		return nil, err
	}
	if cfg.Password, err = readSecret(c.PasswordFile); err != nil {
		return nil, err
	}
	return clientv3.New(cfg)
}

func readSecret(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading catalogue credentials: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
