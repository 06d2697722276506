package valkey

import (
	"context"
	"maps"
	"slices"
	"strings"

	valkeygo "github.com/valkey-io/valkey-go"
)

// The users of a server with auth (its ACL), and the fence of a Cluster node's replication: which
// users it has, with which passwords, and what the fence lets through.

// Fenced reports whether this server refuses to serve a replica's resynchronisation (PSYNC), as a
// Cluster node does from its start until the operator lifts the fence.
func (s *Server) Fenced(ctx context.Context) (bool, error) {
	reply, err := s.do(ctx, s.client.B().AclDryrun().Username(s.fenceUser()).Command("PSYNC").Arg("?", "-1").Build()).ToString()
	if err != nil {
		return false, s.wrap("ACL DRYRUN", err)
	}
	return reply != "OK", nil
}

// Unfence lets replicas resynchronise from this server.
func (s *Server) Unfence(ctx context.Context) error {
	return s.wrap("ACL SETUSER", s.do(ctx, s.client.B().AclSetuser().Username(s.fenceUser()).Rule("+sync", "+psync").Build()).Error())
}

// AllowImports lets this server, with auth, import slots by atomic slot migration (importRules).
// A server without auth, whose replicas authenticate as the default user, or of a release
// without atomic slot migration, has nothing to be given.
func (s *Server) AllowImports(ctx context.Context) error {
	if s.fenceUser() == "default" {
		return nil
	}
	err := s.do(ctx, s.client.B().AclSetuser().Username(s.fenceUser()).Rule(importRules...).Build()).Error()
	if err != nil && strings.Contains(err.Error(), "Unknown command") {
		return nil
	}
	return s.wrap("ACL SETUSER", err)
}

// importRules are what the replication user needs, beyond replication, for its node to import
// slots with atomic slot migration (Valkey 9): a source authenticates to the target as the user
// its replicas use (masteruser), and the target runs the slots' keys it is sent as that user.
// The default user, which the replication user is without auth, has them from the start. They
// are given to a target just before a job moves slots to it, rather than in the ACL file, which
// a server of any release loads, and which an earlier release refuses whole for a command it does
// not know; and only to the nodes that import, since they let the user write every key.
var importRules = []string{"+cluster|syncslots", "+select", "+@write", "~*"}

// fenceUser is the user replicas connect as, whose rights the fence takes away.
func (s *Server) fenceUser() string {
	if s.auth.ReplicationUser == "" {
		return "default"
	}
	return s.auth.ReplicationUser
}

// User is what a server's ACL is to hold for one user: the SHA-256 hashes of its passwords, and
// its rights (ACL rules), unless empty.
type User struct {
	Hashes []string
	Rights string
}

// SetUsers gives each user the passwords whose hashes are listed, and no other, and the rights
// given, in place of those it has (a user given none keeps its own). Sessions already
// authenticated stay up, and their commands are checked against the new rights.
func (s *Server) SetUsers(ctx context.Context, users map[string]User) error {
	var cmds valkeygo.Commands
	for name, user := range users {
		rules := []string{"resetpass"}
		for _, h := range user.Hashes {
			rules = append(rules, "#"+h)
		}
		if user.Rights != "" {
			rules = append(append(rules, "nocommands", "resetkeys", "resetchannels"), strings.Fields(user.Rights)...)
		}
		cmds = append(cmds, s.client.B().AclSetuser().Username(name).Rule(rules...).Build())
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	for _, reply := range s.client.DoMulti(ctx, cmds...) {
		if err := reply.Error(); err != nil {
			return s.wrap("ACL SETUSER", err)
		}
	}
	return nil
}

// HasPasswords reports whether each user exists on the server with exactly the passwords whose
// hashes are listed (ACL GETUSER): a server that loaded an earlier ACL file, or was given other
// passwords by hand, does not. Rights are not compared: Valkey prints them in a form of its own.
func (s *Server) HasPasswords(ctx context.Context, users map[string]User) (bool, error) {
	names := slices.Sorted(maps.Keys(users))
	cmds := make(valkeygo.Commands, 0, len(names))
	for _, name := range names {
		cmds = append(cmds, s.client.B().AclGetuser().Username(name).Build())
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	for i, reply := range s.client.DoMulti(ctx, cmds...) {
		if valkeygo.IsValkeyNil(reply.Error()) {
			return false, nil // no such user
		}
		fields, err := reply.AsMap()
		if err != nil {
			return false, s.wrap("ACL GETUSER", err)
		}
		passwords := fields["passwords"]
		hashes, err := passwords.AsStrSlice()
		if err != nil {
			return false, s.wrap("ACL GETUSER", err)
		}
		slices.Sort(hashes)
		if !slices.Equal(hashes, slices.Sorted(slices.Values(users[names[i]].Hashes))) {
			return false, nil
		}
	}
	return true, nil
}
