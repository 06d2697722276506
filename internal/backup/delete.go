package backup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"slices"

	"example.com/cache-operator/internal/bucket"
)

// DeleteCommand is the operator binary's first argument that runs it as the agent that removes
// a deleted backup's objects from the bucket, in a Job, rather than as the operator.
const DeleteCommand = "delete-backup"

// DeletePlan is which backup's objects a deletion agent removes. The operator writes it as the
// Job's arguments (Args) and the agent reads them back (ParseDeletePlan).
type DeletePlan struct {
	// Location is the bucket, without its credentials; Path is the backup's place in it.
	Location bucket.Location
	Path     string
	// ResultFile is where the agent writes what it removed, or why it failed.
	ResultFile string
}

// Args is the plan as the agent's arguments, after DeleteCommand.
func (p DeletePlan) Args() []string { return locationArgs(p.Location, p.Path, p.ResultFile) }

// ParseDeletePlan reads a plan from the agent's arguments.
func ParseDeletePlan(args []string) (DeletePlan, error) {
	var p DeletePlan
	flags := flag.NewFlagSet(DeleteCommand, flag.ContinueOnError)
	locationFlags(flags, &p.Location, &p.Path, &p.ResultFile)
	if err := flags.Parse(args); err != nil {
		return p, err
	}
	if p.Location.Endpoint == "" || p.Location.Bucket == "" || p.Path == "" {
		return p, errors.New("--endpoint, --bucket and --path are required")
	}
	return p, nil
}

// RunDelete removes the objects of the backup the arguments name, with the credentials from
// the environment, and reports what it removed. It returns the process's exit code.
func RunDelete(ctx context.Context, args []string) int {
	plan, err := ParseDeletePlan(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, DeleteCommand+":", err)
		return 2
	}
	loc := plan.Location
	loc.CABundle = []byte(os.Getenv(EnvCABundle))
	b, err := bucket.Open(loc, credentialsFromEnv())
	message := ""
	if err == nil {
		var n int
		n, err = Delete(ctx, b, plan.Path)
		message = fmt.Sprintf("deleted %d objects under %s/", n, plan.Path)
	}
	return report(DeleteCommand, plan.ResultFile, message, err)
}

// Delete removes every object under a backup's path (those of a backup that never completed
// too), its manifest first: a backup half removed is never one that looks complete. It returns
// how many objects it removed; a backup already gone is no error.
func Delete(ctx context.Context, b *bucket.Bucket, backupPath string) (int, error) {
	names, err := b.List(ctx, backupPath+"/")
	if err != nil {
		return 0, err
	}
	manifest := path.Join(backupPath, ManifestName)
	if slices.Contains(names, manifest) {
		if err := b.Delete(ctx, manifest); err != nil {
			return 0, err
		}
	}
	rest := slices.DeleteFunc(slices.Clone(names), func(name string) bool { return name == manifest })
	if err := b.Delete(ctx, rest...); err != nil {
		return 0, err
	}
	return len(names), nil
}
