package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// kubeClient is a minimal admin client for the local kube-apiserver (no client-go, to keep mgmtctl small).
type kubeClient struct {
	base string
	hc   *http.Client
}

func newKubeClient(stateDir string) (*kubeClient, error) {
	pki := pkiDir(stateDir)
	pool, err := caPool(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		return nil, fmt.Errorf("load admin client certificate: %w", err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}
	return &kubeClient{
		base: fmt.Sprintf("https://127.0.0.1:%d", apiserverPort),
		hc:   &http.Client{Transport: tr},
	}, nil
}

func caPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificate in %s", path)
	}
	return pool, nil
}

func (k *kubeClient) do(ctx context.Context, method, path, contentType string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, k.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (k *kubeClient) ready(ctx context.Context) error {
	code, body, err := k.do(ctx, http.MethodGet, "/readyz", "", nil)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("/readyz returned %d: %s", code, firstLine(body))
	}
	return nil
}

// apply server-side applies obj at path (the object's URL).
func (k *kubeClient) apply(ctx context.Context, path string, obj map[string]any) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	code, resp, err := k.do(ctx, http.MethodPatch, path+"?fieldManager=capkk-mgmt&force=true",
		"application/apply-patch+yaml", body)
	if err != nil {
		return fmt.Errorf("apply %s: %w", path, err)
	}
	if code/100 != 2 {
		return fmt.Errorf("apply %s: HTTP %d: %s", path, code, statusMessage(resp))
	}
	return nil
}

func (k *kubeClient) get(ctx context.Context, path string) (map[string]any, error) {
	code, resp, err := k.do(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("get %s: HTTP %d: %s", path, code, statusMessage(resp))
	}
	var obj map[string]any
	return obj, json.Unmarshal(resp, &obj)
}

// webhooksAnswer proves that the kube-apiserver reaches the mutating webhooks of all three managers: a
// dry-run create of one object per manager must not fail with "failed calling webhook" (a validation
// rejection by the webhook itself is fine: it answered).
func (k *kubeClient) webhooksAnswer(ctx context.Context) error {
	probes := []struct{ path, body string }{
		{"/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters",
			`{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Cluster","metadata":{"name":"mgmt-probe"},"spec":{}}`},
		{"/apis/bootstrap.cluster.x-k8s.io/v1beta2/namespaces/default/kubeadmconfigs",
			`{"apiVersion":"bootstrap.cluster.x-k8s.io/v1beta2","kind":"KubeadmConfig","metadata":{"name":"mgmt-probe"},"spec":{}}`},
		{"/apis/controlplane.cluster.x-k8s.io/v1beta2/namespaces/default/kubeadmcontrolplanes",
			`{"apiVersion":"controlplane.cluster.x-k8s.io/v1beta2","kind":"KubeadmControlPlane","metadata":{"name":"mgmt-probe"},"spec":{}}`},
	}
	for _, p := range probes {
		code, resp, err := k.do(ctx, http.MethodPost, p.path+"?dryRun=All", "application/json", []byte(p.body))
		if err != nil {
			return err
		}
		msg := statusMessage(resp)
		if code >= 500 || strings.Contains(msg, "failed calling webhook") {
			return fmt.Errorf("dry-run create at %s: HTTP %d: %s", p.path, code, msg)
		}
	}
	return nil
}

func etcdReady(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("http://127.0.0.1:%d/health", etcdClientPort), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"health":"true"`)) {
		return fmt.Errorf("etcd /health: %d %s", resp.StatusCode, firstLine(b))
	}
	return nil
}

// kcmReady checks kube-controller-manager's /healthz (self-signed serving cert; loopback only).
func kcmReady(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort), nil)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz returned %d: %s", resp.StatusCode, firstLine(b))
	}
	return nil
}

// managerReady checks a manager's /readyz (which includes its webhook server) and that its webhook port
// serves our certificate.
func managerReady(stateDir string, m manager) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			fmt.Sprintf("http://127.0.0.1:%d/readyz", m.healthPort), nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz returned %d: %s", resp.StatusCode, firstLine(b))
		}
		pool, err := caPool(filepath.Join(pkiDir(stateDir), "ca.crt"))
		if err != nil {
			return err
		}
		d := tls.Dialer{NetDialer: &net.Dialer{}, Config: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}
		conn, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", m.webhookPort))
		if err != nil {
			return fmt.Errorf("webhook port %d: %w", m.webhookPort, err)
		}
		return conn.Close()
	}
}

func statusMessage(b []byte) string {
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &st) == nil && st.Message != "" {
		return st.Message
	}
	return firstLine(b)
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
