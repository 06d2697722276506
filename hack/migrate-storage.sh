#!/usr/bin/env bash
# Storage migration, the last step of upgrading to the release that added API v2 (after the CRDs
# and the operator; docs/upgrade.md): rewrites every Cache still stored as v1 in the storage
# version, v2, then records in the CRD that no object is stored as v1 any more, as the storage
# version migrator does. Safe to run again, and while the operator runs. Uses kubectl's current
# context; KUBECTL names another kubectl.
set -euo pipefail
kubectl=${KUBECTL:-kubectl}
resource=caches.v2.cache.example.com

$kubectl get "$resource" --all-namespaces --no-headers \
	-o custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name |
	while read -r namespace name; do
		# An empty patch changes nothing but the encoding: the API server writes the object back
		# in the storage version. A Cache deleted meanwhile needs no migrating.
		if ! out=$($kubectl patch "$resource" "$name" --namespace "$namespace" --type merge --patch '{}' 2>&1); then
			grep -q NotFound <<<"$out" || { echo "$out" >&2; exit 1; }
		fi
	done

$kubectl patch customresourcedefinition caches.cache.example.com --subresource status --type merge \
	--patch '{"status":{"storedVersions":["v2"]}}'
echo "Every Cache is stored as v2."
