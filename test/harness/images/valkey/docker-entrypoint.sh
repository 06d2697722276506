#!/bin/sh
# The entrypoint of this project's Valkey image (test/harness/images), our own script. It does
# what the official image's docker-entrypoint.sh (valkey-io/valkey-container) does, in the cases
# the Cache's pods and the tests use:
#   - arguments that begin with an option or a config file (*.conf) are the server's;
#   - the server started as root first gives the working directory's files to the valkey user and
#     then runs as that user, without supplementary groups (a Cache's pod runs as valkey already);
#   - the server gets the umask 0077 unless a umask other than the default 0022 was set;
#   - the words of VALKEY_EXTRA_FLAGS are appended to the command.
# Protected mode, which the official image turns off in its build, is off by the valkey-server in
# /usr/local/bin instead: a pod's own command (sh -c '... exec "$@"') skips this script.
set -e

case $1 in
-* | *.conf) set -- valkey-server "$@" ;;
esac

if [ "$1" = valkey-server ] && [ "$(id -u)" = 0 ]; then
	find . ! -user valkey -exec chown valkey {} +
	exec setpriv --reuid=valkey --regid=valkey --clear-groups -- "$0" "$@"
fi

if [ "$(umask)" = 0022 ]; then
	umask 0077
fi

# Unquoted on purpose: the variable holds several flags.
# shellcheck disable=SC2086
exec "$@" $VALKEY_EXTRA_FLAGS
