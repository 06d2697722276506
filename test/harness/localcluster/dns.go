package localcluster

import (
	"context"
	"fmt"

	"example.com/cache-operator/test/harness/images"
	"example.com/cache-operator/test/harness/realnode"
)

// CoreDNSImage is the cluster DNS's image, built from the toolchain's CoreDNS.
const CoreDNSImage = images.DefaultCoreDNSName

// dnsManifest is the cluster's DNS, as a kubeadm cluster has it: CoreDNS answering the cluster's
// names from the API server, behind the kube-dns Service at the address the kubelets give the
// pods. It has no upstream: a name outside the cluster does not resolve, since nothing here may
// be reached outside the machine. It listens on an unprivileged port, so that it needs no
// capability, and the Service maps port 53 to it.
func dnsManifest(p realnode.Plan) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:1053 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa {
            pods insecure
        }
        cache 30
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: coredns
        image: %s
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {name: dns, containerPort: 1053, protocol: UDP}
        - {name: dns-tcp, containerPort: 1053, protocol: TCP}
        readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
        livenessProbe: {httpGet: {path: /health, port: 8080}}
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
        volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: %s
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, targetPort: 1053, protocol: UDP}
  - {name: dns-tcp, port: 53, targetPort: 1053, protocol: TCP}
`, CoreDNSImage, p.DNSServiceIP())
}

// installDNS installs the cluster DNS and waits until it answers.
func (c *Cluster) installDNS(ctx context.Context, p realnode.Plan) error {
	if err := c.kubectlStdin(ctx, dnsManifest(p), "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}
	return c.Kubectl(ctx, "rollout", "status", "--namespace", "kube-system", "deployment/coredns", "--timeout=3m")
}
