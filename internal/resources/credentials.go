package resources

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/valkey"
)

// This file is the credentials of a Cache with auth: the Valkey users and their rights, the
// Secret of the application user's credentials the operator makes when the spec names none
// (AppSecret), and the Secret that holds everything else (ACLSecret): the other users'
// passwords, the hashes of the application passwords in force, and the ACL file the servers
// load at their start. A password rotation is the ACL Secret moving from one state to the next
// (NextACL), one write per step, each step decided by what the Secret holds and the clock.

// The Valkey users of a Cache with auth besides cachev2.AppUser, each with only the commands it
// needs. Their passwords are made once, with the Cache, and kept in its ACL Secret.
const (
	// OperatorUser is the operator's: it forms and heals a Cluster, sets the users' passwords,
	// and checks a restore. Its password is in no pod.
	OperatorUser = "operator"
	// ReplicationUser is the one a replica authenticates as to its primary (masteruser). A
	// Cluster node starts with it fenced (ReplicationFence); a Standalone Cache, which has no
	// replicas, has no such user.
	ReplicationUser = "replication"
	// ExporterUser is the metrics exporter's: it reads what the server reports, nothing else.
	ExporterUser = "exporter"
	// NodeUser is what a pod's own containers speak to their server as: the readiness agent's
	// checks, and the preStop hook of a Cluster or Replicated node, which has a replica take
	// over (CLUSTER FAILOVER on the replica; FAILOVER on a Replicated primary, which Users
	// grants it in that mode only). An
	// administrator's valkey-cli in the container speaks as it too (REDISCLI_AUTH), and may also
	// read the cluster's state as the runbooks do.
	NodeUser = "node"
	// BackupUser is the backup agent's: it reads where each shard is and what it holds, and
	// takes its snapshot (SYNC, which is the whole dataset: a backup's very purpose).
	BackupUser = "backup"
)

// internalUsers are the users whose passwords the ACL Secret holds, under their names.
var internalUsers = []string{OperatorUser, ReplicationUser, ExporterUser, NodeUser, BackupUser}

// userRules are each user's rights; the application user's are appRights. The exporter may run what
// redis_exporter reads by default, and nothing that shows a key, a value or a setting: not
// CONFIG GET (masterauth, the replication user's password, is not redacted, and that user may
// SYNC, which is the whole dataset), not SLOWLOG GET (commands with their arguments), not CLIENT
// LIST; without them the exporter leaves out the config and slow-log details it would export
// (redis_config_*, redis_slowlog_last_id), and reads maxmemory from INFO.
//
// The node and backup users read no key and change no setting: each has the commands of
// readiness.ClusterNodeReady, readiness.ReplicatedNodeReady, handOverScript and failOverScript, or
// of the backup agent (package backup), and no
// more, so that a pod, or a backup's Job, holds no password that could. Every rule in the ACL
// file must name a command of every release the Cache may run: Valkey 8 refuses to start on one
// it does not know (such as 9's CLUSTER GETSLOTMIGRATIONS).
var userRules = map[string]string{
	OperatorUser:    "~* &* +@all",
	ReplicationUser: "+psync +sync +replconf +ping",
	ExporterUser: "+info +ping +client|setname +slowlog|len +latency|latest +latency|histogram +cluster|info " +
		"+select +dbsize",
	NodeUser: "+ping +info +role +cluster|nodes +cluster|myid +cluster|replicas +cluster|failover " +
		"+cluster|info +cluster|shards",
	BackupUser: "+ping +info +cluster|nodes +sync +replconf",
}

// appRights are the application user's rights: what a cache's client needs, every key and
// channel, and every command but the administrative ones (@admin: CONFIG, ACL, replication,
// SHUTDOWN, the cluster's own management and the like) and those that wipe every key, reach
// beyond the client's own keys or write to another server (the rest of @dangerous: FLUSHALL,
// FLUSHDB, KEYS, MIGRATE, RESTORE, SORT, SWAPDB; INFO, which clients read, excepted; and SCRIPT
// FLUSH and FUNCTION FLUSH), unless the spec grants them (spec.auth.grant). The administrative
// ones are taken away last, so that no grant gives them back.
func appRights(cache *cachev2.Cache) string {
	rules := []string{"~*", "&*", "+@all", "-@dangerous", "+info", "-script|flush", "-function|flush"}
	for _, g := range cache.Spec.Auth.Grant {
		rules = append(rules, "+"+string(g))
	}
	return strings.Join(append(rules, "-@admin"), " ")
}

// ReplicationFence is the rule a Cluster node's replication user starts with: no SYNC and no
// PSYNC, until the operator lifts the fence (see FenceRule, the same for a Cache without auth).
var ReplicationFence = []string{"-sync", "-psync"}

// Keys of the ACL Secret, and its annotation.
const (
	// ACLFileKey holds the ACL file a server loads at its start (aclfile).
	ACLFileKey = "users.acl"
	// appHashesKey holds the SHA-256 hashes of the application passwords in force, newest
	// last, separated by spaces: more than one during a rotation's grace period.
	appHashesKey = "app-password-hashes"
	// AnnotationPreviousPasswordsUntil is when the application passwords other than the newest
	// stop working (RFC 3339); absent when there are none.
	AnnotationPreviousPasswordsUntil = "cache.example.com/previous-passwords-until"
	// AnnotationACLApplied is the digest of the users' passwords (ACLDigest) that every node
	// running when it was written has been given; the operator sets passwords on the running
	// servers only when it differs from the file's.
	AnnotationACLApplied = "cache.example.com/acl-applied"
)

// Keys of the application user's Secret.
const (
	AppUsernameKey = "username"
	AppPasswordKey = "password"
)

// MinPasswordLength is the shortest application password the operator accepts from a Secret the
// user names: a cache's password is tried at network speed by whoever reaches a node.
const MinPasswordLength = 16

// ACLSecretName is the name of the Secret that holds a Cache's ACL.
func ACLSecretName(cache *cachev2.Cache) string { return cache.Name + "-acl" }

// StripSecret is what the operator's informer keeps of a Secret of a Cache's credentials (one
// that carries LabelCredentialsOf), which it keeps one of per credential and Cache, some 4 KiB of
// data each for a Cache with auth and TLS: the data but for the ACL file, which the operator
// writes and never reads, and of the annotations only its own, which ReadACL reads. A user's
// Secret applied with kubectl holds its whole self again in an annotation. Of its labels only
// LabelCredentialsOf is kept, by which a Secret's events find their Cache, and not its owner
// nor its UID, which no pass reads of a Secret: a fifth of what the informer keeps of one
// (BenchmarkInformerCopies in the controller's package). Every update of such a Secret starts
// from a fresh read of the whole stored object.
func StripSecret(secret *corev1.Secret) *corev1.Secret {
	meta := CachedMeta(secret.ObjectMeta)
	meta.Labels = map[string]string{cachev2.LabelCredentialsOf: meta.Labels[cachev2.LabelCredentialsOf]}
	meta.OwnerReferences, meta.UID = nil, ""
	stripped := &corev1.Secret{TypeMeta: secret.TypeMeta, ObjectMeta: meta, Type: secret.Type,
		Immutable: secret.Immutable, Data: maps.Clone(secret.Data)}
	delete(stripped.Data, ACLFileKey)
	for _, key := range []string{AnnotationPreviousPasswordsUntil, AnnotationACLApplied} {
		if value, ok := secret.Annotations[key]; ok {
			if stripped.Annotations == nil {
				stripped.Annotations = map[string]string{}
			}
			stripped.Annotations[key] = value
		}
	}
	return stripped
}

// credentialLabels are the labels of the Secrets the operator makes for a Cache's credentials:
// the operator's informer caches the Secrets that carry LabelCredentialsOf, and only those.
func credentialLabels(cache *cachev2.Cache) map[string]string {
	l := Labels(cache)
	l[cachev2.LabelCredentialsOf] = cache.Name
	return l
}

// AppSecret is the Secret of the application user's credentials that the operator makes for a
// Cache whose spec names none, with a new random password.
func AppSecret(cache *cachev2.Cache) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: cache.AuthSecretName(), Namespace: cache.Namespace, Labels: credentialLabels(cache)},
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			AppUsernameKey: []byte(cachev2.AppUser),
			AppPasswordKey: []byte(rand.Text()),
		},
	}
}

// AppPassword is the application password in the Secret, or why it cannot be used.
func AppPassword(secret *corev1.Secret) (string, error) {
	password := string(secret.Data[AppPasswordKey])
	switch {
	case password == "":
		return "", fmt.Errorf("the Secret %s has no key %q", secret.Name, AppPasswordKey)
	case len(password) < MinPasswordLength:
		return "", fmt.Errorf("the password in Secret %s is shorter than %d characters", secret.Name, MinPasswordLength)
	case strings.ContainsAny(password, " \t\r\n"):
		return "", fmt.Errorf("the password in Secret %s contains white space", secret.Name)
	}
	return password, nil
}

// ACL is what a Cache's ACL Secret says, read by ReadACL.
type ACL struct {
	// Passwords are the internal users' passwords, by user.
	Passwords map[string]string
	// AppHashes are the hashes of the application passwords in force, newest last.
	AppHashes []string
	// PreviousUntil is when the hashes other than the newest stop working; zero when there are
	// none.
	PreviousUntil time.Time
	// Applied is the digest of the passwords that every running node has been given.
	Applied string
}

// ReadACL reads a stored ACL Secret; nil reads as an empty ACL.
func ReadACL(secret *corev1.Secret) ACL {
	acl := ACL{Passwords: map[string]string{}}
	if secret == nil {
		return acl
	}
	for _, user := range internalUsers {
		if p := string(secret.Data[user]); p != "" {
			acl.Passwords[user] = p
		}
	}
	acl.AppHashes = strings.Fields(string(secret.Data[appHashesKey]))
	acl.PreviousUntil, _ = time.Parse(time.RFC3339, secret.Annotations[AnnotationPreviousPasswordsUntil])
	acl.Applied = secret.Annotations[AnnotationACLApplied]
	return acl
}

// PasswordHash is the hash by which Valkey's ACL knows a password (#<hash>).
func PasswordHash(password string) string {
	sum := sha256.Sum256([]byte(password))
	return hex.EncodeToString(sum[:])
}

// NextACL is the ACL that follows acl, given the application password now in force and the
// time: the internal users get a password where they have none; a new application password
// joins the old ones, which keep working for the grace period; once that is over, only the
// newest stays. The second result is when the next step is due (zero: none is).
func NextACL(cache *cachev2.Cache, acl ACL, appPassword string, now time.Time) (ACL, time.Time) {
	next := ACL{Passwords: map[string]string{}, Applied: acl.Applied}
	for _, user := range internalUsers {
		next.Passwords[user] = acl.Passwords[user]
		if next.Passwords[user] == "" {
			next.Passwords[user] = rand.Text()
		}
	}
	hash := PasswordHash(appPassword)
	grace := cache.Spec.Auth.RotationGracePeriod
	switch {
	case len(acl.AppHashes) == 0:
		next.AppHashes = []string{hash}
	case acl.AppHashes[len(acl.AppHashes)-1] != hash && grace != nil && grace.Duration > 0:
		// A rotation starts, or starts over: every password in force keeps working for the
		// grace period from now.
		next.AppHashes = append(slices.DeleteFunc(slices.Clone(acl.AppHashes), func(h string) bool { return h == hash }), hash)
		next.PreviousUntil = now.Add(grace.Duration).Truncate(time.Second)
	case len(acl.AppHashes) > 1 && now.Before(acl.PreviousUntil) && acl.AppHashes[len(acl.AppHashes)-1] == hash:
		next.AppHashes, next.PreviousUntil = acl.AppHashes, acl.PreviousUntil
	default:
		next.AppHashes = []string{hash}
	}
	if len(next.AppHashes) > 1 {
		return next, next.PreviousUntil
	}
	return next, time.Time{}
}

// GivenToNodes reports whether the ACL holds the user's password and every node running when it
// was written has been given every user in it.
func (a ACL) GivenToNodes(cache *cachev2.Cache, user string) bool {
	return a.Passwords[user] != "" && a.Applied == a.Digest(cache)
}

// Equal reports whether two ACLs store the same.
func (a ACL) Equal(b ACL) bool {
	return fmt.Sprint(a.Passwords) == fmt.Sprint(b.Passwords) && slices.Equal(a.AppHashes, b.AppHashes) &&
		a.PreviousUntil.Equal(b.PreviousUntil) && a.Applied == b.Applied
}

// Users are what each user is to have, by user: its password hashes, and its rights, but for a
// Cluster's replication user's, whose fence the operator lifts on a running server
// (ReplicationFence). What the operator gives the running servers (valkey.SetUsers), and what the
// ACL file holds. A Replicated node needs no fence: it starts as a replica of HoldAddress, which
// serves no resynchronisation.
func (a ACL) Users(cache *cachev2.Cache) map[string]valkey.User {
	users := map[string]valkey.User{cachev2.AppUser: {Hashes: a.AppHashes, Rights: appRights(cache)}}
	for _, user := range internalUsers {
		switch {
		case user == ReplicationUser && cache.Spec.Mode == cachev2.ModeStandalone:
		case user == ReplicationUser && cache.Spec.Mode == cachev2.ModeCluster:
			users[user] = valkey.User{Hashes: []string{PasswordHash(a.Passwords[user])}}
		case user == NodeUser && cache.Spec.Mode == cachev2.ModeReplicated:
			// A Replicated primary's preStop hook hands over with FAILOVER (failOverScript),
			// which no other mode's node needs: Cluster mode refuses it.
			users[user] = valkey.User{Hashes: []string{PasswordHash(a.Passwords[user])}, Rights: userRules[user] + " +failover"}
		default:
			users[user] = valkey.User{Hashes: []string{PasswordHash(a.Passwords[user])}, Rights: userRules[user]}
		}
	}
	return users
}

// Digest is a digest of the users' passwords and rights, for AnnotationACLApplied: a change of
// either is given to the running servers.
func (a ACL) Digest(cache *cachev2.Cache) string {
	users := a.Users(cache)
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(users)) {
		fmt.Fprintf(&b, "%s %s %s\n", name, strings.Join(users[name].Hashes, " "), users[name].Rights)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:8])
}

// File is the ACL file a server loads at its start: Valkey's default user off, and each user
// with its rights and password hashes. A Cluster node's replication user starts fenced.
func (a ACL) File(cache *cachev2.Cache) string {
	users := a.Users(cache)
	var b strings.Builder
	b.WriteString("user default off resetkeys resetchannels -@all\n")
	for _, name := range slices.Sorted(maps.Keys(users)) {
		rules := users[name].Rights
		if name == ReplicationUser && cache.Spec.Mode == cachev2.ModeCluster {
			rules = strings.Join(slices.DeleteFunc(strings.Fields(userRules[name]), func(r string) bool {
				return slices.Contains(ReplicationFence, "-"+strings.TrimPrefix(r, "+"))
			}), " ")
		}
		fmt.Fprintf(&b, "user %s on", name)
		for _, h := range users[name].Hashes {
			fmt.Fprintf(&b, " #%s", h)
		}
		fmt.Fprintf(&b, " %s\n", rules)
	}
	return b.String()
}

// ACLSecret is the ACL Secret that stores acl.
func ACLSecret(cache *cachev2.Cache, acl ACL) *corev1.Secret {
	data := map[string][]byte{
		ACLFileKey:   []byte(acl.File(cache)),
		appHashesKey: []byte(strings.Join(acl.AppHashes, " ")),
	}
	for user, password := range acl.Passwords {
		data[user] = []byte(password)
	}
	annotations := map[string]string{}
	if !acl.PreviousUntil.IsZero() {
		annotations[AnnotationPreviousPasswordsUntil] = acl.PreviousUntil.UTC().Format(time.RFC3339)
	}
	if acl.Applied != "" {
		annotations[AnnotationACLApplied] = acl.Applied
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: ACLSecretName(cache), Namespace: cache.Namespace,
			Labels: credentialLabels(cache), Annotations: annotations},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// MergeAppSecret makes dst, a stored Secret of the application user or a new empty one, carry
// desired's labels, and desired's credentials if it has no password: a password that is there,
// the user's or an earlier one, stays.
func MergeAppSecret(dst, desired *corev1.Secret) {
	mergeLabels(&dst.Labels, desired.Labels)
	if len(dst.Data[AppPasswordKey]) == 0 {
		dst.Type, dst.Data = desired.Type, desired.Data
	}
}

// MergeACLSecret makes dst, a stored ACL Secret or a new empty one, hold what desired holds, and
// leaves labels and annotations of others alone.
func MergeACLSecret(dst, desired *corev1.Secret) {
	mergeLabels(&dst.Labels, desired.Labels)
	for _, key := range []string{AnnotationPreviousPasswordsUntil, AnnotationACLApplied} {
		delete(dst.Annotations, key)
	}
	if len(desired.Annotations) > 0 {
		mergeAnnotations(&dst.Annotations, desired.Annotations)
	}
	dst.Type, dst.Data = desired.Type, desired.Data
}
