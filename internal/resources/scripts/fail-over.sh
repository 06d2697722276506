#!/bin/sh
# fail-over.sh: a Replicated node's preStop hook (why: internal/resources/replicatednode.go). The
# kubelet runs it in the Valkey container when the pod is deleted or evicted, before it stops the
# server, with the image's shell, coreutils and grep, and valkey-cli. It ends once its server is a
# replica, or after 10 s, and exits 0 whatever happens: the server is stopped after it anyway.
#
# $1 is how valkey-cli reaches the pod's own server: the program and its options, as words; $2
# is how long, in milliseconds, the primary may hold its writers (resources.HandOverTimeout).
# shellcheck disable=SC2086 # $cli is a program and its options: split into words
set -u
cli=$1
timeout_ms=$2

# Only a primary with a replica in sync hands over.
[ "$($cli ROLE | head -n 1)" = master ] || exit 0
$cli INFO replication | grep -q '^slave[0-9]*:.*state=online' || exit 0

# FAILOVER holds the primary's writers while a replica catches up, at most timeout_ms, then makes
# that replica the primary and this server its replica: no acknowledged write is lost. The
# operator then moves the primary's label, and so its Service, to the new primary.
$cli FAILOVER TIMEOUT "$timeout_ms" | grep -q OK || exit 0
for _ in $(seq 50); do
	[ "$($cli ROLE | head -n 1)" = slave ] && exit 0
	sleep 0.2
done
