package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// generatePKI writes a fresh CA and the certificates the plane needs into dir:
//
//	ca.crt/ca.key              self-signed CA (also the webhook and conversion caBundle)
//	apiserver.crt/.key         kube-apiserver serving cert (127.0.0.1, localhost, kubernetes.default...)
//	admin.crt/.key             client cert in system:masters (used by the kubeconfig)
//	sa.key/sa.pub              service account token signing key
//	webhook/tls.crt, tls.key   serving cert shared by the CAPI managers' webhook servers (127.0.0.1)
func generatePKI(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "webhook"), 0o700); err != nil {
		return err
	}
	ca, err := newCA()
	if err != nil {
		return err
	}
	if err := writePair(dir, "ca", ca); err != nil {
		return err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	apiserver, err := issue(ca, "kube-apiserver", nil,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		append(loopback, net.ParseIP("10.0.0.1")), x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	if err := writePair(dir, "apiserver", apiserver); err != nil {
		return err
	}
	admin, err := issue(ca, "capkk-mgmt-admin", []string{"system:masters"}, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	if err := writePair(dir, "admin", admin); err != nil {
		return err
	}
	webhook, err := issue(ca, "capi-webhooks", nil, []string{"localhost"}, loopback, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "webhook", "tls.crt"), certPEM(webhook.cert), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "webhook", "tls.key"), keyPEM(webhook.key), 0o600); err != nil {
		return err
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), keyPEM(sa), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		0o644)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
}

func newCA() (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "capkk-mgmt-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert, key}, nil
}

func issue(ca *keyPair, cn string, orgs, dns []string, ips []net.IP, usage x509.ExtKeyUsage) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("issue %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert, key}, nil
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func keyPEM(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		panic(err) // only fails for unsupported curves
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func writePair(dir, name string, kp *keyPair) error {
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), certPEM(kp.cert), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), keyPEM(kp.key), 0o600)
}

// writeKubeconfig writes the admin kubeconfig (certificates embedded) atomically.
func writeKubeconfig(stateDir string) error {
	pki := pkiDir(stateDir)
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(pki, name))
		return base64.StdEncoding.EncodeToString(b), err
	}
	ca, err := read("ca.crt")
	if err != nil {
		return err
	}
	crt, err := read("admin.crt")
	if err != nil {
		return err
	}
	key, err := read("admin.key")
	if err != nil {
		return err
	}
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: capkk-mgmt
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority-data: %s
users:
- name: capkk-mgmt-admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: capkk-mgmt
  context:
    cluster: capkk-mgmt
    user: capkk-mgmt-admin
    namespace: default
current-context: capkk-mgmt
`, apiserverPort, ca, crt, key)
	tmp := kubeconfigPath(stateDir) + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, kubeconfigPath(stateDir))
}
