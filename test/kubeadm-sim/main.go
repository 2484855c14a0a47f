// Command kubeadm is a kubeadm simulator for capkk-rs sandbox hosts.
//
// Sandbox hosts (network namespace + overlay root + sshd, see test/sandbox) have no container runtime and no
// images, so the real kubeadm cannot bring up a control plane there. This program is shipped to hosts by the
// binary service in place of kubeadm and does what Cluster API reads back from a kubeadm-built node:
//
//	kubeadm init --config /run/kubeadm/kubeadm.yaml
//	    reads ClusterConfiguration + InitConfiguration and the PKI that cloud-init wrote to /etc/kubernetes/pki,
//	    issues the kube-apiserver serving certificate from the cluster CA, starts a real etcd (127.0.0.1:2379) and
//	    a real kube-apiserver (<advertiseAddress>:<bindPort>) as daemons, then creates what kubeadm leaves behind:
//	    the kubeadm-config and kubelet-config ConfigMaps, kube-public/cluster-info, kubeadm's bootstrap RBAC, the
//	    Node (labels, taints, Ready status, addresses) and /etc/kubernetes/admin.conf.
//	kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml
//	    discovers the cluster through kube-public/cluster-info, pins the CA with caCertHashes as kubeadm does and
//	    registers the Node (Ready) using the bootstrap token as a bearer token. Deviation from kubeadm: the real
//	    join performs a TLS bootstrap (CSR signed by kube-controller-manager, which is not run here); init grants
//	    the group system:bootstrappers the right to create/patch Nodes instead.
//	kubeadm reset [-f]
//	    stops the daemons started by init and removes what kubeadm reset removes.
//	kubeadm upgrade node
//	    writes the cluster's kubelet-config to /var/lib/kubelet/config.yaml, as kubeadm does on a worker.
//	kubeadm kubelet --kubelet-version V
//	    not a kubeadm command: the status loop of the kubelet stand-in (sandbox hosts have no kubelet), reporting
//	    this host's Node Ready with kubeletVersion V while /etc/kubernetes/kubelet.conf exists.
//	kubeadm version [-o short|json|yaml]
//
// etcd and kube-apiserver come embedded (build.sh, -tags embedcp: extracted to /var/lib/kubelet/kubeadm-sim/bin)
// or are looked up in $KUBEADM_SIM_BIN_DIR, next to this program, /usr/local/bin and /usr/bin: either way they
// reach the host only through the binary service. Logs and pid files go to /var/lib/kubelet/kubeadm-sim/.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// version is the kubeadm version this simulator reports; set with -ldflags "-X main.version=v1.36.3".
var version = "v1.36.3"

func usage() {
	fmt.Fprintln(os.Stderr, `kubeadm (capkk-rs simulator) - commands: init, join, reset, version
  kubeadm init --config FILE      start etcd + kube-apiserver from the cluster PKI, register this Node
  kubeadm join --config FILE      register this Node in the cluster named by the join configuration
  kubeadm reset [-f]              stop what init started, remove kubeadm's files
  kubeadm upgrade node            write the cluster's kubelet configuration (a worker's in-place upgrade)
  kubeadm kubelet --kubelet-version V [--interval 5s]
                                  the kubelet stand-in's status loop: report this Node Ready with version V
  kubeadm version [-o short]`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(1)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "init":
		err = runInit(args)
	case "join":
		err = runJoin(args)
	case "reset":
		err = runReset(args)
	case "version":
		err = runVersion(args)
	case "upgrade":
		err = runUpgrade(args)
	case "kubelet":
		err = runKubelet(args)
	case "-h", "--help", "help":
		usage()
		return
	default:
		err = fmt.Errorf("unknown command %q (this simulator supports init, join, reset, upgrade node, version, kubelet)", cmd)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "error execution phase %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

// flagValue returns the value of --name VALUE or --name=VALUE in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func hasFlag(args []string, names ...string) bool {
	for _, a := range args {
		for _, n := range names {
			if a == n || strings.HasPrefix(a, n+"=") {
				return true
			}
		}
	}
	return false
}

func configPath(args []string) (string, error) {
	p, ok := flagValue(args, "config")
	if !ok || p == "" {
		return "", errors.New("--config is required: the simulator only supports config-file driven init/join")
	}
	return p, nil
}

func runVersion(args []string) error {
	out, _ := flagValue(args, "output")
	if o, ok := flagValue(args, "o"); ok {
		out = o
	}
	for i, a := range args {
		if a == "-o" && i+1 < len(args) {
			out = args[i+1]
		}
	}
	switch out {
	case "short":
		fmt.Println(version)
	case "json":
		fmt.Printf("{\"clientVersion\":{\"gitVersion\":%q,\"platform\":\"linux/amd64\",\"simulator\":true}}\n", version)
	case "yaml":
		fmt.Printf("clientVersion:\n  gitVersion: %s\n  platform: linux/amd64\n  simulator: true\n", version)
	default:
		fmt.Printf("kubeadm version: &version.Info{GitVersion:%q, Platform:\"linux/amd64\", Simulator:true}\n", version)
	}
	return nil
}
