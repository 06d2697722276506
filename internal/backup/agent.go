package backup

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/bucket"
	"example.com/cache-operator/internal/snapshot"
	"example.com/cache-operator/internal/valkey"
)

// AgentCommand is the operator binary's first argument that runs it as a backup's agent, in the
// backup's Job, rather than as the operator.
const AgentCommand = "backup"

// The environment variables the agent reads the bucket's credentials from: the Job's pod takes
// them from the user's Secret, so that they are never in the pod's spec nor read by the operator.
const (
	EnvAccessKeyID     = "BUCKET_ACCESS_KEY_ID"
	EnvSecretAccessKey = "BUCKET_SECRET_ACCESS_KEY"
	EnvCABundle        = "BUCKET_CA_BUNDLE"
)

// The environment variables the agent reads the credentials it speaks to a Cache's servers with
// from, when the Cache has auth: the Job's pod takes them from the Cache's ACL Secret.
const (
	EnvValkeyUser     = "VALKEY_USER"
	EnvValkeyPassword = "VALKEY_PASSWORD"
)

// The environment variables the agent reads how it speaks TLS to a Cache's servers from, when
// the Cache has TLS: the CA's certificate, from the Cache's TLS Secret, and the name the servers'
// certificate has.
const (
	EnvValkeyCA         = "VALKEY_CA_CERT"
	EnvValkeyServerName = "VALKEY_SERVER_NAME"
)

// serverAuth is who the agent is to the Cache's servers, and how it speaks TLS to them, from the
// environment.
func serverAuth() (valkey.Auth, error) {
	auth := valkey.Auth{User: os.Getenv(EnvValkeyUser), Password: os.Getenv(EnvValkeyPassword)}
	if ca := os.Getenv(EnvValkeyCA); ca != "" {
		config, err := valkey.TLSConfig([]byte(ca), os.Getenv(EnvValkeyServerName))
		if err != nil {
			return valkey.Auth{}, fmt.Errorf("%s: %w", EnvValkeyCA, err)
		}
		auth.TLS = config
	}
	return auth, nil
}

// MaxResultBytes is how much of a result the kubelet keeps as a container's termination message.
const MaxResultBytes = 4096

// Plan is what a backup's agent is asked to do. The operator writes it as the Job's arguments
// (Args) and the agent reads them back (ParsePlan): one definition for both sides.
type Plan struct {
	// Location is the bucket, without its credentials; Path is the backup's own place in it.
	Location bucket.Location
	Path     string
	// ValkeyVersion is the version the spec gives the servers, which the backup's status shows
	// while it runs; the manifest records the one they report.
	ValkeyVersion string
	// Mode is the mode of the Cache the servers are of: a Cluster's shards' slots go into the
	// manifest.
	Mode   cachev2.Mode
	Shards []Shard
	// Stall is how long a snapshot waits for the next byte before it fails.
	Stall time.Duration
	// ResultFile is where the agent writes its Result, or why it failed: the container's
	// termination message file, which the kubelet reports in the pod's status.
	ResultFile string
}

// Args is the plan as the agent's arguments, after AgentCommand.
func (p Plan) Args() []string {
	args := append(locationArgs(p.Location, p.Path, p.ResultFile),
		"--valkey-version="+p.ValkeyVersion,
		"--cache-mode="+string(p.Mode),
		"--stall="+p.Stall.String(),
	)
	for _, s := range p.Shards {
		args = append(args, "--shard="+strings.Join([]string{s.Name, s.Source, s.Addr}, ","))
	}
	return args
}

// ParsePlan reads a plan from the agent's arguments.
func ParsePlan(args []string) (Plan, error) {
	var p Plan
	flags := flag.NewFlagSet(AgentCommand, flag.ContinueOnError)
	locationFlags(flags, &p.Location, &p.Path, &p.ResultFile)
	flags.StringVar(&p.ValkeyVersion, "valkey-version", "", "The servers' Valkey version.")
	flags.Func("cache-mode", "The mode of the Cache the servers are of.", func(v string) error {
		if !slices.Contains([]cachev2.Mode{cachev2.ModeStandalone, cachev2.ModeCluster, cachev2.ModeReplicated}, cachev2.Mode(v)) {
			return fmt.Errorf("unknown mode %q", v)
		}
		p.Mode = cachev2.Mode(v)
		return nil
	})
	// A Job made by a release before --cache-mode said only whether the Cache was a Cluster;
	// the operator reads its plan back for the backup's status.
	flags.BoolFunc("cluster", "Deprecated: --cache-mode=Cluster, or Standalone.", func(v string) error {
		cluster, err := strconv.ParseBool(v)
		if p.Mode == "" {
			p.Mode = map[bool]cachev2.Mode{true: cachev2.ModeCluster, false: cachev2.ModeStandalone}[cluster]
		}
		return err
	})
	flags.DurationVar(&p.Stall, "stall", snapshot.DefaultStall, "How long a snapshot waits for the next byte.")
	flags.Func("shard", "A shard: name,pod,host:port (repeated).", func(v string) error {
		parts := strings.Split(v, ",")
		if len(parts) != 3 {
			return errors.New("want name,pod,host:port")
		}
		if _, _, err := net.SplitHostPort(parts[2]); err != nil {
			return err
		}
		p.Shards = append(p.Shards, Shard{Name: parts[0], Source: parts[1], Addr: parts[2]})
		return nil
	})
	if err := flags.Parse(args); err != nil {
		return p, err
	}
	if p.Location.Endpoint == "" || p.Location.Bucket == "" || p.Path == "" || p.Mode == "" || len(p.Shards) == 0 {
		return p, errors.New("--endpoint, --bucket, --path, --cache-mode and at least one --shard are required")
	}
	return p, nil
}

// locationArgs are the arguments that say where a backup is (the bucket, without its
// credentials, and the backup's path in it) and where an agent writes its result.
func locationArgs(loc bucket.Location, backupPath, resultFile string) []string {
	return []string{
		"--endpoint=" + loc.Endpoint,
		"--insecure=" + strconv.FormatBool(loc.Insecure),
		"--region=" + loc.Region,
		"--bucket=" + loc.Bucket,
		"--prefix=" + loc.Prefix,
		"--path=" + backupPath,
		"--result-file=" + resultFile,
	}
}

// locationFlags reads back what locationArgs wrote.
func locationFlags(flags *flag.FlagSet, loc *bucket.Location, backupPath, resultFile *string) {
	flags.StringVar(&loc.Endpoint, "endpoint", "", "The S3 server's host[:port].")
	flags.BoolVar(&loc.Insecure, "insecure", false, "Plain HTTP.")
	flags.StringVar(&loc.Region, "region", "", "The bucket's region.")
	flags.StringVar(&loc.Bucket, "bucket", "", "The bucket.")
	flags.StringVar(&loc.Prefix, "prefix", "", "The prefix of every object's name.")
	flags.StringVar(backupPath, "path", "", "The backup's path under the prefix.")
	flags.StringVar(resultFile, "result-file", "/dev/termination-log", "Where the result is written.")
}

// Result is what a backup's agent reports when it ends well: the sizes, whole and per shard,
// and what the snapshots were taken of. An imported backup's agent reports the same, from its
// manifest. It must fit in a termination message: the shards are left out when they would not.
type Result struct {
	Bytes         int64         `json:"bytes"`
	Keys          int64         `json:"keys"`
	ValkeyVersion string        `json:"valkeyVersion,omitempty"`
	RDBFormat     int           `json:"rdbFormat,omitempty"`
	Cluster       bool          `json:"cluster,omitempty"`
	Shards        []ShardResult `json:"shards,omitempty"`
}

// ShardResult is one shard's part of a Result; its object is the plan's path and its name.
type ShardResult struct {
	Name   string `json:"name"`
	Source string `json:"source,omitempty"`
	Bytes  int64  `json:"bytes"`
	Keys   int64  `json:"keys"`
	// Slots are a Cluster shard's slots (valkey.FormatSlots).
	Slots string `json:"slots,omitempty"`
	// Memory is what the shard's data took on its server (Shard.Memory).
	Memory int64 `json:"memory,omitempty"`
}

// resultOf is what a backup's manifest says, as a Result. A Cluster's shards have slots.
func resultOf(m Manifest) Result {
	r := Result{ValkeyVersion: m.ValkeyVersion, RDBFormat: m.RDBFormat}
	for _, s := range m.Shards {
		r.Bytes += s.Bytes
		r.Keys += s.Keys
		r.Cluster = r.Cluster || len(s.Slots) > 0
		r.Shards = append(r.Shards, ShardResult{Name: s.Name, Source: s.Source, Bytes: s.Bytes, Keys: s.Keys, Slots: valkey.FormatSlots(s.Slots), Memory: s.Memory})
	}
	return r
}

// ParseResult reads the Result a backup's agent reported.
func ParseResult(message string) (Result, error) {
	var r Result
	err := json.Unmarshal([]byte(message), &r)
	return r, err
}

// RunAgent takes the backup the arguments plan, with the credentials from the environment, and
// writes its Result, or why it failed, to the plan's result file. It returns the process's exit
// code: a Job whose pod ends in failure is a failed backup.
func RunAgent(ctx context.Context, args []string) int {
	plan, err := ParsePlan(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "backup:", err)
		return 2
	}
	result, err := plan.run(ctx)
	message := ""
	if err == nil {
		message, err = result.message()
	}
	return report(AgentCommand, plan.ResultFile, message, err)
}

// report ends an agent's run: it writes what was done (message), or why it failed (err), to the
// result file, the container's termination message that the operator reads, and to the log; and
// returns the process's exit code, non-zero on failure, so that the kubelet and the Job see it.
func report(command, resultFile, message string, err error) int {
	if err != nil {
		message = err.Error()
	}
	fmt.Fprintln(os.Stderr, command+":", message)
	if len(message) > MaxResultBytes {
		message = message[:MaxResultBytes]
	}
	if werr := os.WriteFile(resultFile, []byte(message), 0o600); werr != nil {
		fmt.Fprintln(os.Stderr, command+": writing the result:", werr)
	}
	if err != nil {
		return 1
	}
	return 0
}

func (p Plan) run(ctx context.Context) (Result, error) {
	b, err := openBucket(p.Location)
	if err != nil {
		return Result{}, err
	}
	shards := slices.Clone(p.Shards)
	var version string
	for i := range shards {
		d, err := inspectShard(ctx, shards[i])
		if err != nil {
			return Result{}, err
		}
		shards[i].Memory = d.Memory
		if version == "" || valkey.OlderVersion(version, d.Version) {
			version = d.Version
		}
	}
	for i := range shards {
		var primary string
		if p.Mode == cachev2.ModeCluster {
			shards[i].Slots, primary, err = shardSlots(ctx, shards[i].Addr)
		} else {
			primary, err = primaryOf(ctx, shards[i].Addr, p.Stall)
		}
		if err != nil {
			return Result{}, fmt.Errorf("shard %s from %s: %w", shards[i].Name, shards[i].Source, err)
		}
		if primary != shards[i].Addr {
			// A replica does not evict (replica-ignore-maxmemory), so it may hold more than
			// maxmemory: the memory the data needs is what its primary counts.
			d, err := datasetAt(ctx, primary)
			if err != nil {
				return Result{}, fmt.Errorf("shard %s, the primary of %s: %w", shards[i].Name, shards[i].Source, err)
			}
			shards[i].Memory = d.Memory
		}
	}
	var unmoved func(context.Context) error
	if p.Mode == cachev2.ModeCluster {
		if err := wholeCluster(shards); err != nil {
			return Result{}, err
		}
		unmoved = func(ctx context.Context) error { return slotsUnmoved(ctx, shards) }
	}
	auth, err := serverAuth()
	if err != nil {
		return Result{}, err
	}
	m, err := Take(ctx, b, p.Path, version, shards, snapshot.Source{Stall: p.Stall, User: auth.User, Password: auth.Password, TLS: auth.TLS, Version: version}, unmoved)
	if err != nil {
		return Result{}, err
	}
	return resultOf(m), nil
}

// message is the result as a termination message: without the shards' memory if the whole does
// not fit (a restore then checks no memory), and without the shards if that does not fit either
// (a restore is then refused: it needs each shard's keys and slots).
func (r Result) message() (string, error) {
	out, err := json.Marshal(r)
	if err == nil && len(out) > MaxResultBytes {
		r.Shards = slices.Clone(r.Shards)
		for i := range r.Shards {
			r.Shards[i].Memory = 0
		}
		out, err = json.Marshal(r)
	}
	if err == nil && len(out) > MaxResultBytes {
		r.Shards = nil
		out, err = json.Marshal(r)
	}
	return string(out), err
}

// connect connects to the server at addr, host:port, with the credentials of the environment.
func connect(addr string) (*valkey.Server, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	portNumber, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	auth, err := serverAuth()
	if err != nil {
		return nil, err
	}
	return valkey.Connect(host, portNumber, auth)
}
