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

// The operator binary's first arguments that run it, in a Job, as the agent that removes a
// deleted backup's objects from the bucket, or that reads an imported backup's manifest.
const (
	DeleteCommand  = "delete-backup"
	InspectCommand = "inspect-backup"
)

// Place is a backup in a bucket, as an agent that deletes or inspects it is given it. The
// operator writes it as the Job's arguments (Args) and the agent reads them back (ParsePlace).
type Place struct {
	// Location is the bucket, without its credentials; Path is the backup's place in it.
	Location bucket.Location
	Path     string
	// ResultFile is where the agent writes what it did, or why it failed.
	ResultFile string
}

// Args is the place as the agent's arguments, after its command.
func (p Place) Args() []string { return locationArgs(p.Location, p.Path, p.ResultFile) }

// ParsePlace reads a place from the arguments of the agent of the command.
func ParsePlace(command string, args []string) (Place, error) {
	var p Place
	flags := flag.NewFlagSet(command, flag.ContinueOnError)
	locationFlags(flags, &p.Location, &p.Path, &p.ResultFile)
	if err := flags.Parse(args); err != nil {
		return p, err
	}
	if p.Location.Endpoint == "" || p.Location.Bucket == "" || p.Path == "" {
		return p, errors.New("--endpoint, --bucket and --path are required")
	}
	return p, nil
}

// runOnPlace runs an agent that works on the backup its arguments place, in its bucket opened
// with the credentials from the environment, and reports what do says it did.
func runOnPlace(ctx context.Context, command string, args []string, do func(context.Context, *bucket.Bucket, string) (string, error)) int {
	p, err := ParsePlace(command, args)
	if err != nil {
		fmt.Fprintln(os.Stderr, command+":", err)
		return 2
	}
	b, err := openBucket(p.Location)
	message := ""
	if err == nil {
		message, err = do(ctx, b, p.Path)
	}
	return report(command, p.ResultFile, message, err)
}

// RunDelete removes the objects of the backup the arguments place, and reports how many.
func RunDelete(ctx context.Context, args []string) int {
	return runOnPlace(ctx, DeleteCommand, args, func(ctx context.Context, b *bucket.Bucket, backupPath string) (string, error) {
		n, err := Delete(ctx, b, backupPath)
		return fmt.Sprintf("deleted %d objects under %s/", n, backupPath), err
	})
}

// RunInspect reads the manifest of the backup the arguments place, and reports what it lists as
// a Result: an imported backup's status.
func RunInspect(ctx context.Context, args []string) int {
	return runOnPlace(ctx, InspectCommand, args, func(ctx context.Context, b *bucket.Bucket, backupPath string) (string, error) {
		m, err := ReadManifest(ctx, b, backupPath)
		if err != nil {
			return "", err
		}
		return resultOf(m).message()
	})
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
