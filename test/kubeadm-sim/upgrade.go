package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// nodeNameFile records the Node this host registered (init and join), for upgrade and kubelet.
var nodeNameFile = filepath.Join(simDir, "node-name")

// nodeClient is the API client of this host's kubelet (/etc/kubernetes/kubelet.conf) and its Node's name.
func nodeClient() (*apiClient, string, error) {
	path := filepath.Join(kubeDir, "kubelet.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w (the host is not a joined node)", path, err)
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
				CAData string `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				Token    string `json:"token"`
				CertData string `json:"client-certificate-data"`
				KeyData  string `json:"client-key-data"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil || len(kc.Clusters) == 0 || len(kc.Users) == 0 {
		return nil, "", fmt.Errorf("%s: not a kubeconfig with a cluster and a user (%v)", path, err)
	}
	dec := func(s string) []byte {
		if s == "" {
			return nil
		}
		d, _ := base64.StdEncoding.DecodeString(s)
		return d
	}
	u := kc.Users[0].User
	c, err := newAPIClient(kc.Clusters[0].Cluster.Server, dec(kc.Clusters[0].Cluster.CAData), dec(u.CertData),
		dec(u.KeyData), u.Token)
	if err != nil {
		return nil, "", err
	}
	name, err := os.ReadFile(nodeNameFile)
	if err != nil || strings.TrimSpace(string(name)) == "" {
		return nil, "", fmt.Errorf("%s: %v (init or join writes it)", nodeNameFile, err)
	}
	return c, strings.TrimSpace(string(name)), nil
}

// runUpgrade simulates `kubeadm upgrade node` on a worker: the kubelet configuration of the cluster's
// kubelet-config ConfigMap is written to /var/lib/kubelet/config.yaml, as kubeadm does. The new version shows
// once the kubelet restarts on its new binary (see runKubelet). `upgrade apply` (control planes) is refused.
func runUpgrade(args []string) error {
	if len(args) == 0 || args[0] != "node" {
		return errors.New("only `kubeadm upgrade node` is simulated (control planes are not upgraded in place)")
	}
	c, node, err := nodeClient()
	if err != nil {
		return err
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := retry(30*time.Second, "[upgrade] read kube-system/kubelet-config", func(ctx context.Context) error {
		return c.get(ctx, "/api/v1/namespaces/kube-system/configmaps/kubelet-config", &cm)
	}); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(kubeletDir, "config.yaml"), []byte(cm.Data["kubelet"]), 0o644); err != nil {
		return err
	}
	fmt.Printf("[upgrade] Node %s: kubelet configuration written to %s (kubeadm %s simulator)\n",
		node, filepath.Join(kubeletDir, "config.yaml"), version)
	fmt.Println("[upgrade] The configuration for this node was successfully updated!")
	return nil
}

// runKubelet stands in for the kubelet's status loop (the sandbox has no kubelet): while
// /etc/kubernetes/kubelet.conf exists it reports the Node Ready with --kubelet-version every --interval, as a
// kubelet's heartbeat does. A stopped kubelet stops reporting (a test then marks the Node NotReady itself:
// no node lifecycle controller runs in the simulated cluster); a restarted one reports Ready again.
func runKubelet(args []string) error {
	kv, ok := flagValue(args, "kubelet-version")
	if !ok || kv == "" {
		return errors.New("--kubelet-version is required")
	}
	interval := 5 * time.Second
	if v, ok := flagValue(args, "interval"); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("--interval: %w", err)
		}
		interval = d
	}
	fmt.Printf("kubelet (kubeadm simulator) %s: reporting the Node Ready every %s\n", kv, interval)
	last := ""
	for {
		msg := "ok"
		if err := heartbeat(kv); err != nil {
			msg = err.Error()
		}
		if msg != last {
			fmt.Printf("%s heartbeat: %s\n", time.Now().UTC().Format(time.RFC3339), msg)
			last = msg
		}
		time.Sleep(interval)
	}
}

func heartbeat(kubeletVersion string) error {
	c, node, err := nodeClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cur struct {
		Status struct {
			Conditions []struct {
				Type               string `json:"type"`
				Status             string `json:"status"`
				LastTransitionTime string `json:"lastTransitionTime"`
			} `json:"conditions"`
		} `json:"status"`
	}
	if err := c.get(ctx, "/api/v1/nodes/"+node, &cur); err != nil {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339)
	transition := now
	for _, cond := range cur.Status.Conditions {
		if cond.Type == "Ready" && cond.Status == "True" && cond.LastTransitionTime != "" {
			transition = cond.LastTransitionTime
		}
	}
	patch := obj{"status": obj{
		"conditions": []any{obj{"type": "Ready", "status": "True", "reason": "KubeletReady",
			"message":           "kubelet is posting ready status (kubeadm simulator)",
			"lastHeartbeatTime": now, "lastTransitionTime": transition}},
		"nodeInfo": obj{"kubeletVersion": kubeletVersion, "kubeProxyVersion": kubeletVersion},
	}}
	// Strategic merge: conditions merge by type, the other conditions stay.
	if err := c.do(ctx, http.MethodPatch, "/api/v1/nodes/"+node+"/status", "application/strategic-merge-patch+json",
		patch, nil); err != nil {
		return fmt.Errorf("patch Node %s status: %w", node, err)
	}
	return nil
}

// startKubelet restarts the kubelet service as kubeadm's kubelet-start phase does; like kubeadm it only warns
// when that fails (a host without the unit, or a kubelet stand-in that exits at once).
func startKubelet() {
	if _, err := exec.LookPath("systemctl"); err != nil {
		fmt.Println("[kubelet-start] WARNING: no systemctl: the kubelet is not started")
		return
	}
	if out, err := exec.Command("systemctl", "restart", "kubelet").CombinedOutput(); err != nil {
		fmt.Printf("[kubelet-start] WARNING: unable to start the kubelet service: %v %s\n", err, strings.TrimSpace(string(out)))
		return
	}
	fmt.Println("[kubelet-start] Starting the kubelet")
}
