package testenv

import (
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
)

// Balancer plays a Service for processes that run outside the local cluster, where no
// kube-proxy is: it listens on a loopback address and passes each TCP connection, TLS and all,
// to one of its backends picked at random, trying the others when that one refuses. The
// operators' conversion webhooks sit behind one, as they sit behind a Service in a cluster.
type Balancer struct {
	listener net.Listener

	mu       sync.Mutex
	backends []string
}

// NewBalancer listens on a free port of 127.0.0.1 until Close.
func NewBalancer() (*Balancer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Balancer{listener: l}
	go b.serve()
	return b, nil
}

// Port is the port the balancer listens on.
func (b *Balancer) Port() int { return b.listener.Addr().(*net.TCPAddr).Port }

// Add adds a backend address; Remove removes it.
func (b *Balancer) Add(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = append(b.backends, addr)
}

// Remove removes a backend address.
func (b *Balancer) Remove(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = slices.DeleteFunc(b.backends, func(a string) bool { return a == addr })
}

// Close stops listening; connections already passed on run to their end.
func (b *Balancer) Close() error { return b.listener.Close() }

func (b *Balancer) serve() {
	for {
		conn, err := b.listener.Accept()
		if err != nil {
			return
		}
		go b.pass(conn)
	}
}

func (b *Balancer) pass(conn net.Conn) {
	defer conn.Close() //nolint:errcheck
	b.mu.Lock()
	backends := slices.Clone(b.backends)
	b.mu.Unlock()
	rand.Shuffle(len(backends), func(i, j int) { backends[i], backends[j] = backends[j], backends[i] })
	for _, addr := range backends {
		backend, err := net.Dial("tcp", addr)
		if err != nil {
			continue
		}
		defer backend.Close() //nolint:errcheck
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(backend, conn); done <- struct{}{} }()
		go func() { _, _ = io.Copy(conn, backend); done <- struct{}{} }()
		<-done
		return
	}
}
