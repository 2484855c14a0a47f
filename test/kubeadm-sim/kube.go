package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// apiClient is a minimal Kubernetes REST client (JSON over HTTPS) for the few objects kubeadm creates.
type apiClient struct {
	server string
	token  string
	http   *http.Client
}

func newAPIClient(server string, caPEM []byte, certPEM, keyPEM []byte, token string) (*apiClient, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caPEM != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("cluster CA certificate is not valid PEM")
		}
		tc.RootCAs = pool
	} else {
		tc.InsecureSkipVerify = true //nolint:gosec // discovery only: the CA is pinned by hash afterwards
	}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return &apiClient{
		server: server,
		token:  token,
		http:   &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}},
	}, nil
}

// statusError is a non-2xx answer from the apiserver.
type statusError struct {
	Code int
	Body string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Code, e.Body) }

func isCode(err error, code int) bool {
	var se *statusError
	return errors.As(err, &se) && se.Code == code
}

func (c *apiClient) do(ctx context.Context, method, path, contentType string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return &statusError{Code: resp.StatusCode, Body: string(bytes.TrimSpace(data))}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func (c *apiClient) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, "", nil, out)
}

// create POSTs obj to the collection path; an existing object is left as it is (idempotent re-runs).
func (c *apiClient) create(ctx context.Context, collection string, obj any) error {
	err := c.do(ctx, http.MethodPost, collection, "application/json", obj, nil)
	if isCode(err, http.StatusConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", collection, err)
	}
	return nil
}

// mergePatch applies a JSON merge patch to path.
func (c *apiClient) mergePatch(ctx context.Context, path string, patch any) error {
	if err := c.do(ctx, http.MethodPatch, path, "application/merge-patch+json", patch, nil); err != nil {
		return fmt.Errorf("patch %s: %w", path, err)
	}
	return nil
}

// retry calls f until it succeeds or the timeout passes, returning the last error.
func retry(timeout time.Duration, what string, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		last = f(ctx)
		cancel()
		if last == nil {
			return nil
		}
		if isCode(last, http.StatusUnauthorized) || isCode(last, http.StatusForbidden) {
			return fmt.Errorf("%s: %w", what, last) // retrying will not help
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: gave up after %s: %w", what, timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

type obj = map[string]any

// registerNode creates the Node as kubelet registers it and reports it Ready, as kubelet's status loop does.
func registerNode(ctx context.Context, c *apiClient, nr nodeRegistration, controlPlane bool, internalIP, kubeletVersion string) error {
	spec := obj{"taints": nr.taints(controlPlane)}
	if pid := nr.ExtraArgs["provider-id"]; pid != "" {
		spec["providerID"] = pid
	}
	node := obj{
		"apiVersion": "v1",
		"kind":       "Node",
		"metadata": obj{
			"name":        nr.Name,
			"labels":      nr.labels(controlPlane),
			"annotations": obj{"kubeadm.alpha.kubernetes.io/cri-socket": "unix:///var/run/containerd/containerd.sock"},
		},
		"spec": spec,
	}
	if err := c.create(ctx, "/api/v1/nodes", node); err != nil {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339)
	cond := func(t, status, reason, msg string) obj {
		return obj{"type": t, "status": status, "reason": reason, "message": msg,
			"lastHeartbeatTime": now, "lastTransitionTime": now}
	}
	status := obj{"status": obj{
		"conditions": []any{
			cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond("Ready", "True", "KubeletReady", "kubelet is posting ready status (kubeadm simulator)"),
		},
		"addresses": []any{
			obj{"type": "InternalIP", "address": internalIP},
			obj{"type": "Hostname", "address": nr.Name},
		},
		"capacity":    obj{"cpu": "2", "memory": "4Gi", "pods": "110"},
		"allocatable": obj{"cpu": "2", "memory": "4Gi", "pods": "110"},
		"nodeInfo": obj{
			"kubeletVersion": kubeletVersion, "kubeProxyVersion": kubeletVersion,
			"operatingSystem": "linux", "architecture": goArch(),
			"containerRuntimeVersion": "containerd://simulated", "osImage": osImage(),
			"kernelVersion": kernelVersion(), "machineID": "", "systemUUID": "", "bootID": "",
		},
	}}
	if err := c.mergePatch(ctx, "/api/v1/nodes/"+nr.Name+"/status", status); err != nil {
		return err
	}
	// The TaintNodesByCondition admission plugin added node.kubernetes.io/not-ready on create; the node lifecycle
	// controller (kube-controller-manager, not run here) would lift it once the Node is Ready.
	return c.mergePatch(ctx, "/api/v1/nodes/"+nr.Name, obj{"spec": obj{"taints": nr.taints(controlPlane)}})
}

// osImage is /etc/os-release's PRETTY_NAME, as kubelet reports it.
func osImage() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "Linux"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return "Linux"
}

func kernelVersion() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}
