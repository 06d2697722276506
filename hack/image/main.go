// Command image writes one of the local cluster's container images (test/harness/images) as an
// archive that `ctr images import`, `docker load` and `podman load` accept, and prints the
// image's references and its manifest's digest:
//
//	go run ./hack/image [-bin DIR] [-repo DIR] -o FILE.tar IMAGE [IMAGE FLAGS]
//
//	operator [-tag v0.1.0]                     example.com/cache-operator:TAG
//	valkey   [-release 9.1] [-tags 9.1.2,...]  docker.io/valkey/valkey:TAG for each tag (the release's version)
//	exporter                                   docker.io/oliver006/redis_exporter:v1.45.0
//	pause    [-names registry.k8s.io/pause:3.10.1,...]
//	coredns  [-name localhost/coredns:v1.14.3]
//
// The inputs are the toolchain's (hack/toolchain.sh) in -bin, and the repository's source in
// -repo for the images of our own programs (operator, pause).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"example.com/cache-operator/test/harness/images"
	"example.com/cache-operator/test/harness/releases"
)

func main() {
	bin := flag.String("bin", "bin", "the toolchain's bin directory (hack/toolchain.sh)")
	repo := flag.String("repo", ".", "the repository's root, whose programs the operator and pause images hold")
	out := flag.String("o", "", "the archive to write (required)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: image [-bin DIR] [-repo DIR] -o FILE.tar operator|valkey|exporter|pause|coredns [flags]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	start := time.Now()
	img, err := recipe(flag.Arg(0), flag.Args()[1:], *bin, *repo)
	if err != nil {
		fail(err)
	}
	written, err := images.WriteFile(*out, img)
	if err != nil {
		fail(err)
	}
	for _, w := range written {
		for _, name := range w.Names {
			fmt.Printf("%s %s\n", name, w.Digest)
		}
	}
	if info, err := os.Stat(*out); err == nil {
		fmt.Fprintf(os.Stderr, "image: wrote %s (%.1f MiB) in %s\n", *out, float64(info.Size())/(1<<20), time.Since(start).Round(time.Millisecond))
	}
}

// recipe is the image named, with its flags in args.
func recipe(name string, args []string, bin, repo string) (images.Image, error) {
	flags := flag.NewFlagSet(name, flag.ExitOnError)
	var build func() (images.Image, error)
	switch name {
	case "operator":
		tag := flags.String("tag", images.DefaultOperatorTag, "the image's tag")
		build = func() (images.Image, error) { return images.Operator(repo, bin, *tag) }
	case "valkey":
		line := flags.String("release", "9.1", "the Valkey release line of the toolchain (bin/valkey-LINE)")
		tags := flags.String("tags", "", "the image's tags, comma-separated (the release's version if empty)")
		build = func() (images.Image, error) {
			release, err := releases.Line(bin, *line)
			if err != nil {
				return images.Image{}, err
			}
			return images.Valkey(release, strings.FieldsFunc(*tags, func(r rune) bool { return r == ',' })...)
		}
	case "exporter":
		build = func() (images.Image, error) { return images.Exporter(bin) }
	case "pause":
		names := flags.String("names", images.DefaultPauseName, "the image's full references, comma-separated")
		build = func() (images.Image, error) { return images.Pause(repo, strings.Split(*names, ",")...) }
	case "coredns":
		ref := flags.String("name", images.DefaultCoreDNSName, "the image's full reference")
		build = func() (images.Image, error) { return images.CoreDNS(bin, *ref) }
	default:
		return images.Image{}, fmt.Errorf("unknown image %q (operator, valkey, exporter, pause, coredns)", name)
	}
	_ = flags.Parse(args) // it exits on a bad flag
	if flags.NArg() > 0 {
		return images.Image{}, fmt.Errorf("%s: unexpected arguments %q", name, flags.Args())
	}
	return build()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}
