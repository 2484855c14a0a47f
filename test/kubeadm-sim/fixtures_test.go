package main

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// kubeadmFileFromFixture extracts a kubeadm config file from real CABPK bootstrap data (test/fixtures/cabpk,
// captured from the CAPI v1.14 bootstrap controller by `make fixtures`).
func kubeadmFileFromFixture(t *testing.T, fixture, path string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "fixtures", "cabpk", fixture))
	if err != nil {
		t.Fatalf("fixture not available (test/fixtures/cabpk is part of the repository; `make fixtures` recaptures it): %v", err)
	}
	var cc struct {
		WriteFiles []struct {
			Path    string `json:"path"`
			Content string `json:"content"`
		} `json:"write_files"`
	}
	if err := yaml.Unmarshal(raw, &cc); err != nil {
		t.Fatalf("parse %s: %v", fixture, err)
	}
	for _, f := range cc.WriteFiles {
		if f.Path == path {
			return f.Content
		}
	}
	t.Fatalf("%s has no %s", fixture, path)
	return ""
}

func TestRealCABPKInitConfiguration(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kubeadm.yaml")
	must(t, os.WriteFile(p, []byte(kubeadmFileFromFixture(t, "init-control-plane.yaml", "/run/kubeadm/kubeadm.yaml")), 0o600))
	c, err := parseInitConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.clusterName != "demo" || c.endpointHost != "198.18.0.10" || c.endpointPort != 6443 || c.node.Name != "cp-0" {
		t.Errorf("parsed %+v", c)
	}
	// CABPK writes `taints: null`: kubeadm's default control-plane taint applies.
	tt := c.node.taints(true)
	if len(tt) != 1 || tt[0].(map[string]any)["key"] != "node-role.kubernetes.io/control-plane" {
		t.Errorf("taints = %v", tt)
	}
}

func TestRealCABPKJoinConfiguration(t *testing.T) {
	p := filepath.Join(t.TempDir(), "join.yaml")
	must(t, os.WriteFile(p, []byte(kubeadmFileFromFixture(t, "join-worker.yaml", "/run/kubeadm/kubeadm-join-config.yaml")), 0o600))
	docs, err := readConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	jc := docs["JoinConfiguration"]
	if jc.str("discovery", "bootstrapToken", "apiServerEndpoint") != "198.18.0.10:6443" || len(jc.list("discovery", "bootstrapToken", "caCertHashes")) != 1 {
		t.Errorf("discovery = %v", jc.get("discovery"))
	}
	nr, err := parseNodeRegistration(jc)
	if err != nil {
		t.Fatal(err)
	}
	if tt := nr.taints(false); nr.Name != "worker-0" || len(tt) != 1 || tt[0].(map[string]any)["key"] != "node.cluster.x-k8s.io/uninitialized" {
		t.Errorf("nodeRegistration = %+v", nr)
	}
}
