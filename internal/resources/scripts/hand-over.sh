#!/bin/sh
# hand-over.sh: a Cluster node's preStop hook (why a primary hands its shard over:
# internal/resources/clusternode.go). The kubelet runs it in the Valkey container when the pod is
# deleted or evicted, before it stops the server, with the image's shell, coreutils, grep and awk,
# and valkey-cli. It ends once its server is a replica, or after 10 s, and exits 0 whatever
# happens: the server is stopped after it anyway.
#
# $1 is how valkey-cli reaches the pod's own server: the program and its options, as words.
# $2, if there, is how it reaches another node, port included (with TLS, whose port Valkey does
# not print to the hook's plain-text connection); otherwise it is $1 with the port Valkey prints.
# shellcheck disable=SC2086 # $cli and $peer are a program and its options: split into words
set -u
cli=$1 peer=${2-}

# Only a primary with a replica in sync hands over.
[ "$($cli ROLE | head -n 1)" = master ] || exit 0
$cli INFO replication | grep -q '^slave[0-9]*:.*state=online' || exit 0

# A connected replica's address, as Valkey prints it: ip:port@cport[,hostname], an IPv6 address
# without brackets, so the port is what follows the last colon.
addr=$($cli CLUSTER REPLICAS "$($cli CLUSTER MYID)" | awk '$8 == "connected" && $3 !~ /fail/ { print $2; exit }')
addr=${addr%%@*}
host=${addr%:*} port=${addr##*:}
[ -n "$host" ] || exit 0
if [ -n "$peer" ]; then
	$peer -h "$host" CLUSTER FAILOVER | grep -q OK || exit 0
else
	$cli -h "$host" -p "$port" CLUSTER FAILOVER | grep -q OK || exit 0
fi

# The replica takes over once it has caught up; the hook waits as long as that takes, at most
# 10 s, with the server serving meanwhile.
for _ in $(seq 50); do
	[ "$($cli ROLE | head -n 1)" = slave ] && exit 0
	sleep 0.2
done
