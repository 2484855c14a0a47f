package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ca is the cluster CA that cloud-init wrote (CABPK generates it and passes it in the bootstrap data).
type ca struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

func loadCA(dir string) (*ca, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("read cluster CA certificate (written by cloud-init): %w", err)
	}
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("parse %s/ca.crt: %w", dir, err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("read cluster CA key (written by cloud-init): %w", err)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parse %s/ca.key: %w", dir, err)
	}
	return &ca{cert: cert, certPEM: certPEM, key: key}, nil
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("no CERTIFICATE PEM block")
	}
	return x509.ParseCertificate(blk.Bytes)
}

func parseKeyPEM(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	switch blk.Type {
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(blk.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, errors.New("PKCS#8 key is not a signing key")
		}
		return s, nil
	}
	return nil, fmt.Errorf("unsupported key PEM type %q", blk.Type)
}

// certSpec describes a leaf certificate to issue from the CA.
type certSpec struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Server       bool
	Client       bool
}

// issue creates a fresh ECDSA P-256 key and a certificate for it signed by the CA (valid one year, like kubeadm's).
func (c *ca) issue(s certSpec) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key for %s: %w", s.CommonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: s.CommonName, Organization: s.Organization},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     s.DNSNames,
		IPAddresses:  s.IPs,
	}
	if s.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if s.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %s with the cluster CA: %w", s.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// caCertHash is kubeadm's discovery-token-ca-cert-hash: sha256 of the CA's SubjectPublicKeyInfo.
func caCertHash(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// kubeconfig renders a kubeconfig with a client certificate (admin.conf, kubelet.conf) or a token.
func kubeconfig(clusterName, server string, caPEM []byte, user string, certPEM, keyPEM []byte, token string) []byte {
	b64 := base64.StdEncoding.EncodeToString
	var cred string
	if token != "" {
		cred = "    token: " + token + "\n"
	} else {
		cred = "    client-certificate-data: " + b64(certPEM) + "\n    client-key-data: " + b64(keyPEM) + "\n"
	}
	ctx := user + "@" + clusterName
	return []byte(strings.Join([]string{
		"apiVersion: v1",
		"kind: Config",
		"clusters:",
		"- cluster:",
		"    certificate-authority-data: " + b64(caPEM),
		"    server: " + server,
		"  name: " + clusterName,
		"contexts:",
		"- context:",
		"    cluster: " + clusterName,
		"    user: " + user,
		"  name: " + ctx,
		"current-context: " + ctx,
		"preferences: {}",
		"users:",
		"- name: " + user,
		"  user:",
		strings.TrimSuffix(cred, "\n"),
		"",
	}, "\n"))
}

// apiserverCertSpec is the kube-apiserver serving certificate kubeadm issues (CN kube-apiserver, the
// kubernetes service names, the first service IP, the advertise address, the endpoint and certSANs).
func apiserverCertSpec(nodeName, advertise, endpointHost, serviceSubnet, dnsDomain string, certSANs []string) (certSpec, error) {
	s := certSpec{CommonName: "kube-apiserver", Server: true}
	s.DNSNames = []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc." + dnsDomain, nodeName}
	svcIP, err := firstServiceIP(serviceSubnet)
	if err != nil {
		return s, err
	}
	s.IPs = []net.IP{svcIP, net.ParseIP(advertise)}
	for _, n := range append([]string{endpointHost}, certSANs...) {
		if n == "" {
			continue
		}
		if ip := net.ParseIP(n); ip != nil {
			s.IPs = append(s.IPs, ip)
		} else {
			s.DNSNames = append(s.DNSNames, n)
		}
	}
	return s, nil
}

func firstServiceIP(subnet string) (net.IP, error) {
	first := strings.Split(subnet, ",")[0]
	_, n, err := net.ParseCIDR(strings.TrimSpace(first))
	if err != nil {
		return nil, fmt.Errorf("networking.serviceSubnet %q: %w", subnet, err)
	}
	ip := make(net.IP, len(n.IP))
	copy(ip, n.IP)
	ip[len(ip)-1]++
	return ip, nil
}
