package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

func runJoin(args []string) error {
	path, err := configPath(args)
	if err != nil {
		return err
	}
	docs, err := readConfig(path)
	if err != nil {
		return err
	}
	jc, ok := docs["JoinConfiguration"]
	if !ok {
		return fmt.Errorf("%s: no JoinConfiguration document", path)
	}
	if jc.get("controlPlane") != nil {
		return fmt.Errorf("JoinConfiguration.controlPlane is set: joining a control-plane node is not simulated " +
			"(use one control-plane replica with this simulator)")
	}
	endpoint := jc.str("discovery", "bootstrapToken", "apiServerEndpoint")
	token := jc.str("discovery", "bootstrapToken", "token")
	if endpoint == "" || token == "" {
		return fmt.Errorf("discovery.bootstrapToken.apiServerEndpoint and .token are required (file discovery is not simulated)")
	}
	var hashes []string
	for _, h := range jc.list("discovery", "bootstrapToken", "caCertHashes") {
		hashes = append(hashes, strings.ToLower(fmt.Sprint(h)))
	}
	unsafeSkip := jc.str("discovery", "bootstrapToken", "unsafeSkipCAVerification") == "true"
	if len(hashes) == 0 && !unsafeSkip {
		return fmt.Errorf("discovery.bootstrapToken.caCertHashes is empty and unsafeSkipCAVerification is not set")
	}
	nr, err := parseNodeRegistration(jc)
	if err != nil {
		return fmt.Errorf("JoinConfiguration: %w", err)
	}
	host, port, err := splitHostPort(endpoint, 6443)
	if err != nil {
		return fmt.Errorf("discovery.bootstrapToken.apiServerEndpoint: %w", err)
	}
	server := "https://" + net.JoinHostPort(host, fmt.Sprint(port))
	fmt.Printf("[preflight] Running pre-flight checks (kubeadm simulator), discovering %s\n", server)

	// [discovery] cluster-info fetched anonymously without trusting the server, then the CA pinned by its hash.
	insecure, err := newAPIClient(server, nil, nil, nil, "")
	if err != nil {
		return err
	}
	var ci struct {
		Data map[string]string `json:"data"`
	}
	if err := retry(2*time.Minute, "[discovery] get kube-public/cluster-info", func(ctx context.Context) error {
		return insecure.get(ctx, "/api/v1/namespaces/kube-public/configmaps/cluster-info", &ci)
	}); err != nil {
		return err
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				CAData string `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
	}
	if err := yaml.Unmarshal([]byte(ci.Data["kubeconfig"]), &kc); err != nil || len(kc.Clusters) == 0 {
		return fmt.Errorf("[discovery] cluster-info has no cluster entry (%v)", err)
	}
	caPEM, err := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CAData)
	if err != nil {
		return fmt.Errorf("[discovery] cluster-info CA data: %w", err)
	}
	caCert, err := parseCertPEM(caPEM)
	if err != nil {
		return fmt.Errorf("[discovery] cluster-info CA: %w", err)
	}
	if len(hashes) > 0 {
		got := caCertHash(caCert)
		matched := false
		for _, h := range hashes {
			matched = matched || h == got
		}
		if !matched {
			return fmt.Errorf("[discovery] cluster CA %s matches none of discovery.bootstrapToken.caCertHashes", got)
		}
	}
	fmt.Println("[discovery] Cluster info signature and contents are valid and TLS certificate validates against pinned roots")

	c, err := newAPIClient(server, caPEM, nil, nil, token)
	if err != nil {
		return err
	}
	internalIP, err := localAddressTowards(host)
	if err != nil {
		return err
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := retry(30*time.Second, "[kubelet-start] read kube-system/kubeadm-config", func(ctx context.Context) error {
		return c.get(ctx, "/api/v1/namespaces/kube-system/configmaps/kubeadm-config", &cm)
	}); err != nil {
		return err
	}
	// The kubelet installed with this kubeadm is of its version, which a worker may have below the control
	// plane's (a worker's upgrade comes after the control plane's).
	if err := retry(60*time.Second, "[kubelet-start] register Node "+nr.Name, func(ctx context.Context) error {
		return registerNode(ctx, c, nr, false, internalIP, version)
	}); err != nil {
		return err
	}
	// What kubeadm join leaves on disk: the cluster CA, kubelet's bootstrap kubeconfig and flags.
	if err := writeFile(filepath.Join(pkiDir, "ca.crt"), caPEM, 0o644); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(kubeDir, "bootstrap-kubelet.conf"),
		kubeconfig("kubernetes", server, caPEM, "tls-bootstrap-token-user", nil, nil, token), 0o600); err != nil {
		return err
	}
	// A real kubelet writes kubelet.conf after its TLS bootstrap (a client certificate signed by
	// kube-controller-manager, not run here); the simulator's kubelet keeps using the bootstrap token, which
	// expires with it (CABPK's token TTL, 15 min by default): enough for the tests' upgrades and heartbeats.
	if err := writeFile(filepath.Join(kubeDir, "kubelet.conf"),
		kubeconfig("kubernetes", server, caPEM, "system:node:"+nr.Name, nil, nil, token), 0o600); err != nil {
		return err
	}
	if err := writeFile(nodeNameFile, []byte(nr.Name+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(kubeDir, "manifests"), 0o755); err != nil {
		return err
	}
	if err := writeKubeletFlags(nr); err != nil {
		return err
	}
	startKubelet()
	fmt.Printf("\nThis node has joined the cluster: Node %s registered (Ready) at %s (kubeadm simulator)\n", nr.Name, server)
	return nil
}
