#!/bin/sh
# start.sh: the Valkey container's command when something must be done in its data directory
# before the server starts: with auth, on a Cluster node, on a Standalone node restored from a
# backup (which steps: internal/resources/valkeycontainer.go). It runs at every start of the
# container, a restart in place too, as the container's user, in the data volume (the image's
# working directory), with the image's shell and coreutils.
#
# Its arguments are steps, done in their order, then --, then the server's command line, which
# it runs in its place (exec) once every step has succeeded. A step that fails fails the start,
# and the kubelet restarts the container:
#   --write-acl FILE  writes the ACL file FILE from $VALKEY_ACL, the ACL Secret's as it is now
#   --remove FILE     removes FILE, if it is there
#   --take FROM TO    renames FROM to TO, if FROM is there
set -eu

while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
	case $1 in
	--write-acl)
		printf '%s\n' "$VALKEY_ACL" >"$2"
		shift 2
		;;
	--remove)
		rm -f "$2"
		shift 2
		;;
	--take)
		if [ -f "$2" ]; then
			mv "$2" "$3"
		fi
		shift 3
		;;
	*)
		echo "start.sh: unknown step $1" >&2
		exit 2
		;;
	esac
done
if [ "$#" -eq 0 ]; then
	echo "start.sh: no -- and server command line after the steps" >&2
	exit 2
fi
shift
exec "$@"
