package main

// The simulator on real sandbox hosts: init -> a kube-apiserver that answers with the cluster CA, the Node Ready,
// kubeadm-config; join -> a second Node registered with its taints; reset -> processes and files gone.
//
// Needs root and two environment variables (test/kubeadm-sim/sandbox-test.sh sets them):
//   KUBEADM_SIM_SANDBOX      path of the sandbox CLI (cargo build -p capkk-sandbox --bin sandbox)
//   KUBEADM_SIM_BIN          the simulator; built by build.sh it carries etcd and kube-apiserver
//   KUBEADM_SIM_CP_BIN_DIR   (optional) directory of etcd and kube-apiserver to install next to a plain build

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

type sandbox struct {
	t    *testing.T
	bin  string
	name string
}

func (s sandbox) run(args ...string) string {
	s.t.Helper()
	out, err := exec.Command(s.bin, args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("sandbox %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// exec runs a shell script inside host (out of band: the test plays cloud-init and the binary service here).
func (s sandbox) exec(host, script string) (string, error) {
	out, err := exec.Command(s.bin, "exec", "--name", s.name, "--host", host, "--", script).CombinedOutput()
	return string(out), err
}

func (s sandbox) mustExec(host, script string) string {
	s.t.Helper()
	out, err := s.exec(host, script)
	if err != nil {
		s.t.Fatalf("%s: %s: %v\n%s", host, script, err, out)
	}
	return out
}

// put writes a file into host (the command line carries it base64-encoded: files created on the machine after
// the host's overlay was mounted are not reliably visible inside it).
func (s sandbox) put(host, path string, content []byte) {
	s.t.Helper()
	s.mustExec(host, fmt.Sprintf("mkdir -p %s && echo %s | base64 -d > %s && chmod 0600 %s",
		filepath.Dir(path), base64.StdEncoding.EncodeToString(content), path, path))
}

// copyIn uploads a local executable to path on the host at addr over SSH (content on stdin, then an atomic
// rename), with the sandbox's client key.
func (s sandbox) copyIn(addr, local, path string) {
	s.t.Helper()
	f, err := os.Open(local)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	key := filepath.Join("/tmp/capkk-sandbox", s.name, "keys", "id_ed25519")
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	dir, tmp := q(filepath.Dir(path)), q(path+".tmp")
	script := fmt.Sprintf("mkdir -p %s && cat > %s && chmod 0755 %s && mv -f %s %s", dir, tmp, tmp, tmp, q(path))
	cmd := exec.Command("ssh", "-i", key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "root@"+addr, script)
	cmd.Stdin = f
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("copy %s to %s:%s: %v\n%s", local, addr, path, err, out)
	}
}

func TestSimulatorOnSandboxHosts(t *testing.T) {
	sbBin, cpDir, simBin := os.Getenv("KUBEADM_SIM_SANDBOX"), os.Getenv("KUBEADM_SIM_CP_BIN_DIR"), os.Getenv("KUBEADM_SIM_BIN")
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if sbBin == "" || simBin == "" {
		missing = append(missing, "KUBEADM_SIM_SANDBOX and KUBEADM_SIM_BIN (run test/kubeadm-sim/sandbox-test.sh)")
	}
	requireOrSkip(t, "sandbox hosts", strings.Join(missing, ", "))
	sb := sandbox{t: t, bin: sbBin, name: "kubeadm-sim"}
	sb.run("up", "--name", sb.name, "--hosts", "2")
	t.Cleanup(func() { _, _ = exec.Command(sb.bin, "down", "--name", sb.name).CombinedOutput() })
	status := sb.run("status", "--name", sb.name)
	var addrs []string
	for _, l := range strings.Split(status, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && strings.HasPrefix(f[0], sb.name+"-") {
			addrs = append(addrs, f[1])
		}
	}
	if len(addrs) != 2 {
		t.Fatalf("expected 2 hosts in status:\n%s", status)
	}
	cp, worker := sb.name+"-1", sb.name+"-2"

	// What the binary service ships and cloud-init writes, staged in a directory both hosts can read.
	stage := t.TempDir()
	writeTestCA(t, stage)
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	must(t, os.WriteFile(filepath.Join(stage, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}), 0o600))
	must(t, os.WriteFile(filepath.Join(stage, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644))
	initCfg := strings.NewReplacer("198.18.0.11", addrs[0], "name: CP-1", "name: "+cp).Replace(initV1beta4)

	// Ship the simulator (and, when built without them embedded, etcd and kube-apiserver) over SSH, as the
	// binary service does: a host is a separate machine and sees none of the machine's files.
	sb.copyIn(addrs[0], simBin, "/usr/local/bin/kubeadm")
	if cpDir != "" {
		for _, b := range []string{"etcd", "kube-apiserver"} {
			sb.copyIn(addrs[0], filepath.Join(cpDir, b), "/usr/local/bin/"+b)
		}
	}
	for _, f := range []string{"ca.crt", "ca.key", "sa.key", "sa.pub"} {
		b, err := os.ReadFile(filepath.Join(stage, f))
		must(t, err)
		sb.put(cp, "/etc/kubernetes/pki/"+f, b)
	}
	sb.put(cp, "/run/kubeadm/kubeadm.yaml", []byte(initCfg))

	t0 := time.Now()
	out := sb.mustExec(cp, "kubeadm init --config /run/kubeadm/kubeadm.yaml")
	t.Logf("init took %s:\n%s", time.Since(t0).Round(time.Millisecond), out)

	// The apiserver answers on the host's address with a certificate from the cluster CA, to admin.conf's user.
	adminConf := sb.mustExec(cp, "cat /etc/kubernetes/admin.conf")
	caPEM, crt, key := kubeconfigCreds(t, adminConf)
	caFile, _ := os.ReadFile(filepath.Join(stage, "ca.crt"))
	if string(caPEM) != string(caFile) {
		t.Fatal("admin.conf does not carry the cluster CA")
	}
	admin, err := newAPIClient("https://"+addrs[0]+":6443", caPEM, crt, key, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type nodeT struct {
		Spec struct {
			ProviderID string                 `json:"providerID"`
			Taints     []struct{ Key string } `json:"taints"`
		} `json:"spec"`
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Status struct {
			Conditions []struct{ Type, Status string }  `json:"conditions"`
			Addresses  []struct{ Type, Address string } `json:"addresses"`
			NodeInfo   struct {
				KubeletVersion string `json:"kubeletVersion"`
			} `json:"nodeInfo"`
		} `json:"status"`
	}
	var node nodeT
	must(t, admin.get(ctx, "/api/v1/nodes/"+cp, &node))
	if !ready(node.Status.Conditions) || node.Spec.ProviderID != "kk://default/cp-1" || len(node.Spec.Taints) != 1 {
		t.Errorf("control-plane Node: %+v", node)
	}
	if _, ok := node.Metadata.Labels["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("control-plane label missing: %v", node.Metadata.Labels)
	}
	var cm struct{ Data map[string]string }
	must(t, admin.get(ctx, "/api/v1/namespaces/kube-system/configmaps/kubeadm-config", &cm))
	if !strings.Contains(cm.Data["ClusterConfiguration"], "clusterName: demo") ||
		!strings.Contains(cm.Data["ClusterConfiguration"], "kind: ClusterConfiguration") {
		t.Errorf("kubeadm-config: %v", cm.Data)
	}

	// join: a bootstrap token as CABPK creates it, then the worker registers through discovery.
	must(t, admin.create(ctx, "/api/v1/namespaces/kube-system/secrets", obj{
		"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
		"metadata": obj{"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
		"stringData": obj{"token-id": "abcdef", "token-secret": "0123456789abcdef", "usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing": "true", "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"},
	}))
	authority, err := loadCA(stage)
	if err != nil {
		t.Fatal(err)
	}
	joinCfg := strings.NewReplacer("198.18.0.11", addrs[0], "sha256:00", caCertHash(authority.cert),
		"name: worker-1", "name: "+worker).Replace(joinV1beta3)
	sb.copyIn(addrs[1], simBin, "/usr/local/bin/kubeadm")
	sb.put(worker, "/run/kubeadm/kubeadm-join-config.yaml", []byte(joinCfg))
	wrong := strings.Replace(joinCfg, caCertHash(authority.cert), "sha256:"+strings.Repeat("0", 64), 1)
	sb.put(worker, "/run/kubeadm/wrong.yaml", []byte(wrong))
	if out, err := sb.exec(worker, "kubeadm join --config /run/kubeadm/wrong.yaml"); err == nil || !strings.Contains(out, "caCertHashes") {
		t.Errorf("join with a wrong CA hash: err=%v out=%s", err, out)
	}
	t0 = time.Now()
	out = sb.mustExec(worker, "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml")
	t.Logf("join took %s:\n%s", time.Since(t0).Round(time.Millisecond), out)
	node = nodeT{}
	must(t, admin.get(ctx, "/api/v1/nodes/"+worker, &node))
	if _, ok := node.Metadata.Labels["node-role.kubernetes.io/control-plane"]; ok {
		t.Errorf("worker carries the control-plane label: %v", node.Metadata.Labels)
	}
	if !ready(node.Status.Conditions) || len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != "node.cluster.x-k8s.io/uninitialized" {
		t.Errorf("worker Node: %+v", node)
	}
	if node.Status.Addresses[0].Address != addrs[1] {
		t.Errorf("worker InternalIP = %v, want %s", node.Status.Addresses, addrs[1])
	}

	// upgrade node: the kubelet configuration from the cluster, with the worker's own kubelet.conf.
	out = sb.mustExec(worker, "kubeadm upgrade node && cat /var/lib/kubelet/config.yaml")
	if !strings.Contains(out, "successfully updated") || !strings.Contains(out, "kind: KubeletConfiguration") {
		t.Errorf("upgrade node: %s", out)
	}
	// The kubelet stand-in's status loop reports the Node Ready with its version again after it went Unknown.
	must(t, admin.do(ctx, http.MethodPatch, "/api/v1/nodes/"+worker+"/status", "application/strategic-merge-patch+json",
		obj{"status": obj{"conditions": []any{obj{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}}}}, nil))
	sb.mustExec(worker, "timeout 2 kubeadm kubelet --kubelet-version v1.99.0 --interval 500ms; true")
	node = nodeT{}
	must(t, admin.get(ctx, "/api/v1/nodes/"+worker, &node))
	if !ready(node.Status.Conditions) || node.Status.NodeInfo.KubeletVersion != "v1.99.0" {
		t.Errorf("after the kubelet's heartbeat: %+v", node.Status)
	}

	// reset: daemons stopped, kubeadm's files gone; a second reset is a no-op.
	for _, h := range []string{worker, cp} {
		t0 = time.Now()
		out := sb.mustExec(h, "kubeadm reset -f")
		t.Logf("reset on %s took %s:\n%s", h, time.Since(t0).Round(time.Millisecond), out)
	}
	leftovers := sb.mustExec(cp, "ls /etc/kubernetes/admin.conf /etc/kubernetes/pki/ca.key /var/lib/etcd /var/lib/kubelet/kubeadm-sim 2>/dev/null; "+
		"for p in /proc/[0-9]*; do c=$(cat $p/comm 2>/dev/null); case $c in etcd|kube-apiserver) grep -q '^State:.*zombie' $p/status 2>/dev/null || echo running $c;; esac; done; true")
	if strings.TrimSpace(leftovers) != "" {
		t.Errorf("after reset on %s: %s", cp, leftovers)
	}
	if out := sb.mustExec(worker, "ls /etc/kubernetes/bootstrap-kubelet.conf /etc/kubernetes/kubelet.conf /etc/kubernetes/pki/ca.crt 2>/dev/null; true"); strings.TrimSpace(out) != "" {
		t.Errorf("after reset on %s: %s", worker, out)
	}
	sb.mustExec(cp, "kubeadm reset -f")
	if err := admin.get(ctx, "/readyz", nil); err == nil {
		t.Error("the apiserver still answers after reset")
	}
}

func ready(conds []struct{ Type, Status string }) bool {
	for _, c := range conds {
		if c.Type == "Ready" && c.Status == "True" {
			return true
		}
	}
	return false
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// kubeconfigCreds extracts the CA and client certificate/key from a kubeconfig with one cluster and user.
func kubeconfigCreds(t *testing.T, kc string) (caPEM, crt, key []byte) {
	t.Helper()
	var c struct {
		Clusters []struct {
			Cluster struct {
				CA string `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				Cert string `json:"client-certificate-data"`
				Key  string `json:"client-key-data"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal([]byte(kc), &c); err != nil || len(c.Clusters) != 1 || len(c.Users) != 1 {
		t.Fatalf("kubeconfig: %v", err)
	}
	dec := func(s string) []byte {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return dec(c.Clusters[0].Cluster.CA), dec(c.Users[0].User.Cert), dec(c.Users[0].User.Key)
}
