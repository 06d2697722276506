package resources

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/readiness"
)

func authCache(mode cachev2.Mode, grace time.Duration) *cachev2.Cache {
	c := testCache()
	c.Spec.Mode = mode
	if mode == cachev2.ModeReplicated {
		c.Spec.Shards, c.Spec.ReplicasPerShard = 1, ptr.To[int32](2)
	}
	c.Spec.Auth = &cachev2.Auth{RotationGracePeriod: &metav1.Duration{Duration: grace}}
	return c
}

// TestNextACLRotatesTheApplicationPasswordWithAGracePeriod walks a rotation: the first ACL has
// the password; a new one joins it until the grace period ends, then stays alone; the internal
// users keep the passwords they were given. Each step read back from its Secret gives the same
// next step: a pass that crashed after its write takes the rotation up where it was.
func TestNextACLRotatesTheApplicationPasswordWithAGracePeriod(t *testing.T) {
	cache := authCache(cachev2.ModeCluster, 10*time.Minute)
	start := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	roundTrip := func(acl ACL) ACL { return ReadACL(ACLSecret(cache, acl)) }

	first, due := NextACL(cache, ReadACL(nil), "first-password-0001", start)
	if !due.IsZero() || !slices.Equal(first.AppHashes, []string{PasswordHash("first-password-0001")}) {
		t.Fatalf("first ACL: hashes %v, due %v", first.AppHashes, due)
	}
	for _, user := range internalUsers {
		if len(first.Passwords[user]) < MinPasswordLength {
			t.Errorf("user %s got password %q", user, first.Passwords[user])
		}
	}
	if again, _ := NextACL(cache, roundTrip(first), "first-password-0001", start.Add(time.Hour)); !again.Equal(first) {
		t.Errorf("an unchanged password moved the ACL: %+v, was %+v", again, first)
	}

	rotating, due := NextACL(cache, roundTrip(first), "second-password-02", start.Add(time.Minute))
	wantDue := start.Add(11 * time.Minute)
	if !due.Equal(wantDue) || !slices.Equal(rotating.AppHashes, []string{PasswordHash("first-password-0001"), PasswordHash("second-password-02")}) {
		t.Fatalf("rotation: hashes %v, due %v, want both, due %v", rotating.AppHashes, due, wantDue)
	}
	if rotating.Passwords[OperatorUser] != first.Passwords[OperatorUser] {
		t.Error("the operator's password changed with the application's")
	}
	if during, due := NextACL(cache, roundTrip(rotating), "second-password-02", wantDue.Add(-time.Second)); !during.Equal(rotating) || !due.Equal(wantDue) {
		t.Errorf("within the grace period: %+v due %v, want it unchanged", during, due)
	}
	after, due := NextACL(cache, roundTrip(rotating), "second-password-02", wantDue)
	if !due.IsZero() || !slices.Equal(after.AppHashes, []string{PasswordHash("second-password-02")}) {
		t.Errorf("after the grace period: hashes %v, due %v, want the new one alone", after.AppHashes, due)
	}

	cache.Spec.Auth.RotationGracePeriod = &metav1.Duration{}
	if at0, due := NextACL(cache, roundTrip(first), "second-password-02", start); !due.IsZero() || len(at0.AppHashes) != 1 {
		t.Errorf("a grace period of 0s kept the previous password: %v", at0.AppHashes)
	}
}

// The ACL file turns Valkey's default user off and holds hashes, not passwords. A Cluster node's
// replication user starts fenced; a Replicated node's may sync from the start (it starts held,
// a replica of an address that serves no sync); a Standalone Cache has no replication user.
func TestTheACLFileTurnsTheDefaultUserOffAndFencesReplication(t *testing.T) {
	for _, mode := range []cachev2.Mode{cachev2.ModeCluster, cachev2.ModeStandalone, cachev2.ModeReplicated} {
		cache := authCache(mode, time.Minute)
		acl, _ := NextACL(cache, ReadACL(nil), "first-password-0001", time.Now())
		lines := strings.Split(strings.TrimSpace(acl.File(cache)), "\n")
		users := map[string]string{}
		for _, line := range lines {
			fields := strings.Fields(line)
			users[fields[1]] = line
		}
		if !strings.HasPrefix(users["default"], "user default off") {
			t.Errorf("%s: default user %q, want off", mode, users["default"])
		}
		if !strings.Contains(users[cachev2.AppUser], "#"+PasswordHash("first-password-0001")) || !strings.Contains(users[cachev2.AppUser], "-@admin") {
			t.Errorf("%s: application user %q", mode, users[cachev2.AppUser])
		}
		if strings.Contains(acl.File(cache), acl.Passwords[OperatorUser]) {
			t.Errorf("%s: the file holds a password rather than its hash", mode)
		}
		if failover := strings.HasSuffix(users[NodeUser], " +failover"); failover != (mode == cachev2.ModeReplicated) {
			t.Errorf("%s: node user %q: FAILOVER %t, want it in Replicated mode only, for its preStop hook", mode, users[NodeUser], failover)
		}
		replication, ok := users[ReplicationUser]
		switch {
		case mode == cachev2.ModeStandalone && ok:
			t.Errorf("a Standalone Cache has a replication user: %q", replication)
		case mode == cachev2.ModeCluster && (!strings.Contains(replication, "+replconf") || strings.Contains(replication, "sync")):
			t.Errorf("replication user %q, want REPLCONF and no SYNC or PSYNC until the fence is lifted", replication)
		case mode == cachev2.ModeReplicated && !strings.HasSuffix(replication, " "+userRules[ReplicationUser]):
			t.Errorf("replication user %q, want it to sync from the start: %q", replication, userRules[ReplicationUser])
		}
	}
}

func TestAppPasswordRefusesWhatCannotBeUsed(t *testing.T) {
	for password, ok := range map[string]bool{
		"":                          false,
		"short":                     false,
		"has a space in the middle": false,
		"long-enough-password":      true,
	} {
		secret := &corev1.Secret{Data: map[string][]byte{AppPasswordKey: []byte(password)}}
		if _, err := AppPassword(secret); (err == nil) != ok {
			t.Errorf("AppPassword(%q): %v", password, err)
		}
	}
}

// TestAContainerWithAuthLoadsTheACLAndItsProbeAuthenticates: the server loads the ACL file from
// the ACL Secret at each start, the replicas of a Cluster or Replicated node authenticate as the
// replication user, and the readiness agent and the preStop hook speak as the node user: no pod
// holds the operator's password. A Cache without auth builds the containers it always did.
func TestAContainerWithAuthLoadsTheACLAndItsProbeAuthenticates(t *testing.T) {
	plain := StatefulSet(testCache(), DefaultImages).Spec.Template.Spec.Containers[0]
	for _, mode := range []cachev2.Mode{cachev2.ModeStandalone, cachev2.ModeCluster, cachev2.ModeReplicated} {
		cache := authCache(mode, time.Minute)
		template := StatefulSet(cache, DefaultImages).Spec.Template
		c := template.Spec.Containers[0]
		args := strings.Join(c.Args, " ")
		if !strings.Contains(args, "--aclfile "+aclFile) || strings.Contains(args, "--user") {
			t.Errorf("%s: args %q, want the ACL file and no --user", mode, args)
		}
		if steps := startSteps(cache); !slices.Equal(steps[:2], []string{"--write-acl", aclFile}) {
			t.Errorf("%s: the start steps %q do not write the ACL file first", mode, steps)
		}
		secrets := secretVariables(c)
		// valkey-cli's password is for the preStop hook, which a Standalone node has not.
		if secrets[envACL] != "orders-cache-acl/"+ACLFileKey || (secrets[envCLIAuth] == "orders-cache-acl/"+NodeUser) != (mode != cachev2.ModeStandalone) {
			t.Errorf("%s: variables from Secrets %v", mode, secrets)
		}
		agent := container(&template, ReadinessContainerName)
		options, err := readiness.ParseArgs(agent.Command[1:])
		if err != nil || options.User != NodeUser || secretVariables(*agent)[readiness.EnvPassword] != "orders-cache-acl/"+NodeUser {
			t.Errorf("%s: the readiness agent runs %q (%v) with %v, want it to authenticate as %s", mode, agent.Command, err, agent.Env, NodeUser)
		}
		for _, c := range template.Spec.Containers {
			if v := secretVariables(c); slices.Contains(slices.Collect(maps.Values(v)), "orders-cache-acl/"+OperatorUser) {
				t.Errorf("%s: container %s holds the operator's password: %v", mode, c.Name, v)
			}
		}
		if replicas := strings.Contains(args, "--masteruser "+ReplicationUser+" --masterauth $("+envReplicationPassword+")"); replicas != (mode != cachev2.ModeStandalone) {
			t.Errorf("%s: args %q: replicas authenticate as %s %t", mode, args, ReplicationUser, replicas)
		}
		if mode != cachev2.ModeStandalone {
			for _, call := range handOver(t, c.Lifecycle.PreStop.Exec.Command, "198.18.1.2:6379@16379") {
				if !strings.HasPrefix(call, "--user "+NodeUser+" ") {
					t.Errorf("the preStop hook ran valkey-cli %q, not as the node user", call)
				}
			}
		}
	}
	if plain.Command != nil || slices.Contains(plain.Args, "--aclfile") || len(plain.Env) != 0 {
		t.Errorf("a Cache without auth got %q %q %v", plain.Command, plain.Args, plain.Env)
	}
}

// secretVariables are the container's environment variables taken from Secrets, as
// secret/key by name.
func secretVariables(c corev1.Container) map[string]string {
	secrets := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secrets[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	return secrets
}

// The application user's grants come after the default's exclusions, and the administrative
// commands are taken away after the grants, so that no grant gives them back.
func TestTheApplicationUsersGrantsComeBeforeTheAdministrativeCommandsGo(t *testing.T) {
	cache := testCache()
	cache.Spec.Auth = &cachev2.Auth{Grant: []cachev2.Grant{"keys", "@dangerous"}}
	rules := strings.Fields(appRights(cache))
	at := func(rule string) int { return slices.Index(rules, rule) }
	if at("-@dangerous") < 0 || at("+keys") < at("-@dangerous") || at("+@dangerous") < at("-@dangerous") || at("-@admin") != len(rules)-1 {
		t.Errorf("rights %q: want the default's exclusions, then the grants, then -@admin last", rules)
	}
}

// The informer's copy of an ACL Secret reads as the same ACL, without the ACL file nobody reads
// from it or anyone's annotations but the operator's; the other credentials keep all their data.
func TestAStrippedSecretKeepsWhatTheOperatorReads(t *testing.T) {
	cache := authCache(cachev2.ModeCluster, time.Hour)
	acl, _ := NextACL(cache, ReadACL(nil), "first", time.Now())
	acl, _ = NextACL(cache, acl, "second", time.Now())
	acl.Applied = acl.Digest(cache)
	stored := ACLSecret(cache, acl)
	stored.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = `{"data":{"operator":"…"}}`
	stored.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	stored.UID = "acl-uid"
	stored.OwnerReferences = []metav1.OwnerReference{{APIVersion: "cache.example.com/v2", Kind: "Cache", Name: cache.Name, UID: "cache-uid", Controller: ptr.To(true)}}
	stripped := StripSecret(stored.DeepCopy())
	if got := ReadACL(stripped); !got.Equal(acl) {
		t.Errorf("the stripped ACL Secret reads %+v, want %+v", got, acl)
	}
	if _, ok := stripped.Data[ACLFileKey]; ok {
		t.Errorf("the stripped ACL Secret keeps the ACL file")
	}
	if want := 2; len(stripped.Annotations) != want || stripped.ManagedFields != nil {
		t.Errorf("the stripped ACL Secret keeps annotations %v and managed fields %v, want only the operator's %d annotations",
			stripped.Annotations, stripped.ManagedFields, want)
	}
	if want := map[string]string{cachev2.LabelCredentialsOf: cache.Name}; !maps.Equal(stripped.Labels, want) || stripped.OwnerReferences != nil || stripped.UID != "" {
		t.Errorf("the stripped ACL Secret keeps labels %v, owners %v and UID %q, want only the label that names its Cache",
			stripped.Labels, stripped.OwnerReferences, stripped.UID)
	}
	if _, ok := stored.Data[ACLFileKey]; !ok {
		t.Errorf("stripping changed the Secret it was given")
	}
	for _, secret := range []*corev1.Secret{AppSecret(cache), TLSSecret(cache, map[string][]byte{TLSCertKey: []byte("c"), TLSKeyKey: []byte("k"), TLSCAKey: []byte("a")})} {
		if stripped := StripSecret(secret); !maps.EqualFunc(stripped.Data, secret.Data, slices.Equal) || stripped.Type != secret.Type {
			t.Errorf("Secret %s stripped holds %s %q, want all of %s %q", secret.Name, stripped.Type, stripped.Data, secret.Type, secret.Data)
		}
	}
}
