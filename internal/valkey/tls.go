package valkey

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
)

// Speaking TLS to a Cache's servers, and having them serve a new certificate.

// TLSConfig is how a client of a Cache's servers speaks TLS: it trusts the CAs whose certificates
// caPEM holds, and only them, and verifies a server's certificate by serverName, whatever address
// it dials (a Cluster's nodes announce their IPs, which no certificate names). It shows no
// certificate of its own: the servers ask none of a client, only of each other on the bus.
func TLSConfig(caPEM []byte, serverName string) (*tls.Config, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no PEM CA certificate")
	}
	return &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}, nil
}

// ReloadCertificates makes the server read its certificate, its key and its CA's certificate
// again from the files it was started with: the files of a Secret volume, which the kubelet
// updates in place when the Secret changes. Valkey reads them again whenever a tls-* setting is
// set, to the same value too, and serves the new certificate to the next connection; those
// already open stay up.
func (s *Server) ReloadCertificates(ctx context.Context) error {
	files, err := s.do(ctx, s.client.B().ConfigGet().Parameter("tls-cert-file", "tls-key-file", "tls-ca-cert-file").Build()).AsStrMap()
	if err != nil {
		return s.wrap("CONFIG GET", err)
	}
	set := s.client.B().ConfigSet().ParameterValue()
	for _, name := range []string{"tls-cert-file", "tls-key-file", "tls-ca-cert-file"} {
		if files[name] == "" {
			return fmt.Errorf("%s has no %s: it does not serve TLS", s.Addr, name)
		}
		set = set.ParameterValue(name, files[name])
	}
	return s.wrap("CONFIG SET", s.do(ctx, set.Build()).Error())
}

// AcceptsClientCertificate fails unless the server at ip:port, dialled with config, accepts the
// client certificate config shows: it does only if it trusts the certificate's CA. With TLS 1.3
// a server refuses a client's certificate once the client has finished its side of the
// handshake, so only a reply proves it was accepted.
func AcceptsClientCertificate(ctx context.Context, ip string, port int, config *tls.Config) error {
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	conn, err := (&tls.Dialer{Config: config}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("a TLS handshake with %s: %w", addr, err)
	}
	defer conn.Close() //nolint:errcheck // a probe: what matters is the reply
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return err
		}
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return fmt.Errorf("%s refused the client certificate: %w", addr, err)
	}
	if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil {
		return fmt.Errorf("%s refused the client certificate: %w", addr, err)
	}
	return nil
}

// ServedCertificate is the certificate the server at ip:port shows a new TLS connection, checked
// as config says.
func ServedCertificate(ctx context.Context, ip string, port int, config *tls.Config) (*x509.Certificate, error) {
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	conn, err := (&tls.Dialer{Config: config}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("a TLS handshake with %s: %w", addr, err)
	}
	defer conn.Close() //nolint:errcheck // only read from
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, errors.New("the server at " + addr + " showed no certificate")
	}
	return certs[0], nil
}
