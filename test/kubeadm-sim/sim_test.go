package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// newTestCA creates a CA the way CABPK does (RSA 2048, PKCS#1 key).
func newTestCA(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

func writeTestCA(t *testing.T, dir string) {
	t.Helper()
	c, k := newTestCA(t)
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), c, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.key"), k, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestIssuedAPIServerCertVerifiesAgainstClusterCA(t *testing.T) {
	dir := t.TempDir()
	writeTestCA(t, dir)
	authority, err := loadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := apiserverCertSpec("cp-1", "198.18.0.11", "cp.example", "10.96.0.0/12", "cluster.local", []string{"198.18.0.100"})
	if err != nil {
		t.Fatal(err)
	}
	crtPEM, _, err := authority.issue(spec)
	if err != nil {
		t.Fatal(err)
	}
	crt, err := parseCertPEM(crtPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(authority.cert)
	for _, name := range []string{"198.18.0.11", "10.96.0.1", "198.18.0.100", "cp.example", "kubernetes.default.svc.cluster.local"} {
		if _, err := crt.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("apiserver cert does not verify for %s: %v", name, err)
		}
	}
	if crt.Subject.CommonName != "kube-apiserver" {
		t.Errorf("CN = %q", crt.Subject.CommonName)
	}
	if h := caCertHash(authority.cert); !strings.HasPrefix(h, "sha256:") || len(h) != 71 {
		t.Errorf("caCertHash = %q", h)
	}
}

const initV1beta4 = `apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: demo
controlPlaneEndpoint: 198.18.0.11:6443
kubernetesVersion: v1.36.3
networking:
  serviceSubnet: 10.128.0.0/12
  dnsDomain: demo.local
apiServer:
  certSANs: [cp.demo]
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: 198.18.0.11
  bindPort: 6443
nodeRegistration:
  name: CP-1
  kubeletExtraArgs:
  - name: provider-id
    value: kk://default/cp-1
  - name: node-labels
    value: tier=cp,zone=a
`

const joinV1beta3 = `apiVersion: kubeadm.k8s.io/v1beta3
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: 198.18.0.11:6443
    token: abcdef.0123456789abcdef
    caCertHashes: ["sha256:00"]
nodeRegistration:
  name: worker-1
  kubeletExtraArgs:
    provider-id: kk://default/worker-1
  taints:
  - key: node.cluster.x-k8s.io/uninitialized
    effect: NoSchedule
`

func TestParseInitConfigV1beta4(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kubeadm.yaml")
	if err := os.WriteFile(p, []byte(initV1beta4), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseInitConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.clusterName != "demo" || c.endpointHost != "198.18.0.11" || c.endpointPort != 6443 || c.advertise != "198.18.0.11" {
		t.Errorf("endpoint parsed wrong: %+v", c)
	}
	if c.serviceSubnet != "10.128.0.0/12" || c.dnsDomain != "demo.local" || c.kubernetesVer != "v1.36.3" {
		t.Errorf("networking parsed wrong: %+v", c)
	}
	if c.node.Name != "cp-1" || c.node.ExtraArgs["provider-id"] != "kk://default/cp-1" {
		t.Errorf("nodeRegistration parsed wrong: %+v", c.node)
	}
	l := c.node.labels(true)
	if l["tier"] != "cp" || l["zone"] != "a" || l["node-role.kubernetes.io/control-plane"] != "" {
		t.Errorf("labels = %v", l)
	}
	if _, ok := l["node-role.kubernetes.io/control-plane"]; !ok {
		t.Error("control-plane label missing")
	}
	if tt := c.node.taints(true); len(tt) != 1 {
		t.Errorf("default control-plane taints = %v", tt)
	}
	if ip := dnsIP(c.serviceSubnet); ip != "10.128.0.10" {
		t.Errorf("dnsIP = %s", ip)
	}
}

func TestParseJoinConfigV1beta3(t *testing.T) {
	p := filepath.Join(t.TempDir(), "join.yaml")
	if err := os.WriteFile(p, []byte(joinV1beta3), 0o600); err != nil {
		t.Fatal(err)
	}
	docs, err := readConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	nr, err := parseNodeRegistration(docs["JoinConfiguration"])
	if err != nil {
		t.Fatal(err)
	}
	tt := nr.taints(false)
	if len(tt) != 1 || tt[0].(map[string]any)["key"] != "node.cluster.x-k8s.io/uninitialized" {
		t.Errorf("taints = %v", tt)
	}
	if nr.ExtraArgs["provider-id"] != "kk://default/worker-1" {
		t.Errorf("extra args = %v", nr.ExtraArgs)
	}
}

func TestBadConfigNamesTheField(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kubeadm.yaml")
	bad := strings.Replace(initV1beta4, "advertiseAddress: 198.18.0.11", "advertiseAddress: not-an-ip", 1)
	if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := parseInitConfig(p)
	if err == nil || !strings.Contains(err.Error(), "localAPIEndpoint.advertiseAddress") {
		t.Errorf("err = %v", err)
	}
	tmpl := strings.Replace(initV1beta4, "name: CP-1", "name: '{{ local_hostname }}'", 1)
	if err := os.WriteFile(p, []byte(tmpl), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parseInitConfig(p); err == nil || !strings.Contains(err.Error(), "nodeRegistration.name") {
		t.Errorf("err = %v", err)
	}
}

func TestFirstServiceIP(t *testing.T) {
	ip, err := firstServiceIP("10.96.0.0/12,fd00::/108")
	if err != nil || !ip.Equal(net.ParseIP("10.96.0.1")) {
		t.Errorf("got %v %v", ip, err)
	}
	if _, err := firstServiceIP("nope"); err == nil || !strings.Contains(err.Error(), "serviceSubnet") {
		t.Errorf("err = %v", err)
	}
}
