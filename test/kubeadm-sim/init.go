package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"
)

const (
	kubeDir    = "/etc/kubernetes"
	pkiDir     = "/etc/kubernetes/pki"
	etcdDir    = "/var/lib/etcd"
	kubeletDir = "/var/lib/kubelet"
	// simDir holds the simulator's pid files and daemon logs; kubeadm reset removes it with /var/lib/kubelet.
	simDir = "/var/lib/kubelet/kubeadm-sim"
)

func goArch() string { return runtime.GOARCH }

// clusterConfig is what init needs from ClusterConfiguration + InitConfiguration.
type clusterConfig struct {
	raw           doc
	clusterName   string
	endpointHost  string
	endpointPort  int
	advertise     string
	bindPort      int
	serviceSubnet string
	dnsDomain     string
	kubernetesVer string
	certSANs      []string
	node          nodeRegistration
}

func parseInitConfig(path string) (*clusterConfig, error) {
	docs, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	cc, ok := docs["ClusterConfiguration"]
	if !ok {
		return nil, fmt.Errorf("%s: no ClusterConfiguration document", path)
	}
	ic, ok := docs["InitConfiguration"]
	if !ok {
		ic = doc{}
	}
	c := &clusterConfig{raw: cc}
	c.clusterName = cc.str("clusterName")
	if c.clusterName == "" {
		c.clusterName = "kubernetes"
	}
	c.kubernetesVer = cc.str("kubernetesVersion")
	if c.kubernetesVer == "" {
		c.kubernetesVer = version
	}
	c.serviceSubnet = cc.str("networking", "serviceSubnet")
	if c.serviceSubnet == "" {
		c.serviceSubnet = "10.96.0.0/12"
	}
	c.dnsDomain = cc.str("networking", "dnsDomain")
	if c.dnsDomain == "" {
		c.dnsDomain = "cluster.local"
	}
	for _, s := range cc.list("apiServer", "certSANs") {
		c.certSANs = append(c.certSANs, fmt.Sprint(s))
	}
	c.bindPort = 6443
	if p := ic.str("localAPIEndpoint", "bindPort"); p != "" {
		if c.bindPort, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("InitConfiguration.localAPIEndpoint.bindPort %q: %w", p, err)
		}
	}
	if ep := cc.str("controlPlaneEndpoint"); ep != "" {
		if c.endpointHost, c.endpointPort, err = splitHostPort(ep, c.bindPort); err != nil {
			return nil, fmt.Errorf("ClusterConfiguration.controlPlaneEndpoint: %w", err)
		}
	}
	c.advertise = ic.str("localAPIEndpoint", "advertiseAddress")
	if c.advertise == "" {
		towards := c.endpointHost
		if towards == "" {
			towards = "198.18.0.1"
		}
		if c.advertise, err = localAddressTowards(towards); err != nil {
			return nil, fmt.Errorf("InitConfiguration.localAPIEndpoint.advertiseAddress is empty: %w", err)
		}
	}
	if net.ParseIP(c.advertise) == nil {
		return nil, fmt.Errorf("InitConfiguration.localAPIEndpoint.advertiseAddress %q is not an IP", c.advertise)
	}
	if c.endpointHost == "" {
		c.endpointHost, c.endpointPort = c.advertise, c.bindPort
	}
	if c.node, err = parseNodeRegistration(ic); err != nil {
		return nil, fmt.Errorf("InitConfiguration: %w", err)
	}
	return c, nil
}

func (c *clusterConfig) endpointURL() string {
	return "https://" + net.JoinHostPort(c.endpointHost, strconv.Itoa(c.endpointPort))
}

func (c *clusterConfig) localURL() string {
	return "https://" + net.JoinHostPort(c.advertise, strconv.Itoa(c.bindPort))
}

func runInit(args []string) error {
	path, err := configPath(args)
	if err != nil {
		return err
	}
	cfg, err := parseInitConfig(path)
	if err != nil {
		return err
	}
	fmt.Printf("[init] Using Kubernetes version: %s (kubeadm simulator)\n", cfg.kubernetesVer)
	if _, err := os.Stat(filepath.Join(kubeDir, "admin.conf")); err == nil {
		return fmt.Errorf("[preflight] %s/admin.conf already exists: run 'kubeadm reset' first", kubeDir)
	}
	etcdBin, err := findBinary("etcd")
	if err != nil {
		return err
	}
	apiserverBin, err := findBinary("kube-apiserver")
	if err != nil {
		return err
	}
	authority, err := loadCA(pkiDir)
	if err != nil {
		return err
	}
	for _, f := range []string{"sa.key", "sa.pub"} {
		if _, err := os.Stat(filepath.Join(pkiDir, f)); err != nil {
			return fmt.Errorf("[certs] %s/%s is missing (cloud-init writes it from the bootstrap data): %w", pkiDir, f, err)
		}
	}

	// [certs] kube-apiserver serving certificate from the cluster CA.
	spec, err := apiserverCertSpec(cfg.node.Name, cfg.advertise, cfg.endpointHost, cfg.serviceSubnet, cfg.dnsDomain, cfg.certSANs)
	if err != nil {
		return err
	}
	crt, key, err := authority.issue(spec)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(pkiDir, "apiserver.crt"), crt, 0o644); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(pkiDir, "apiserver.key"), key, 0o600); err != nil {
		return err
	}
	fmt.Printf("[certs] apiserver serving cert is signed for %v %v\n", spec.DNSNames, spec.IPs)
	// [kubeconfig] admin.conf (kubeadm:cluster-admins, bound to cluster-admin below) and kubelet.conf.
	adminCrt, adminKey, err := authority.issue(certSpec{CommonName: "kubernetes-admin",
		Organization: []string{"kubeadm:cluster-admins"}, Client: true})
	if err != nil {
		return err
	}
	superCrt, superKey, err := authority.issue(certSpec{CommonName: "kubernetes-super-admin",
		Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		return err
	}
	kubeletCrt, kubeletKey, err := authority.issue(certSpec{CommonName: "system:node:" + cfg.node.Name,
		Organization: []string{"system:nodes"}, Client: true})
	if err != nil {
		return err
	}
	for _, d := range []string{filepath.Join(kubeDir, "manifests"), simDir, etcdDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}

	// [etcd] + [control-plane]: real daemons instead of static pods.
	etcdArgs := []string{
		"--name=" + cfg.node.Name, "--data-dir=" + etcdDir,
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=" + cfg.node.Name + "=http://127.0.0.1:2380",
		"--listen-metrics-urls=http://127.0.0.1:2381", "--log-level=warn",
	}
	if err := startDaemon("etcd", etcdBin, etcdArgs); err != nil {
		return err
	}
	if err := retry(60*time.Second, "[etcd] wait for etcd health", func(ctx context.Context) error {
		return httpOK(ctx, &http.Client{}, "http://127.0.0.1:2379/health")
	}); err != nil {
		return withLog(err, "etcd")
	}
	fmt.Println("[etcd] etcd is healthy on 127.0.0.1:2379")
	apiArgs := []string{
		"--advertise-address=" + cfg.advertise,
		"--bind-address=0.0.0.0",
		"--secure-port=" + strconv.Itoa(cfg.bindPort),
		"--etcd-servers=http://127.0.0.1:2379",
		"--client-ca-file=" + filepath.Join(pkiDir, "ca.crt"),
		"--tls-cert-file=" + filepath.Join(pkiDir, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(pkiDir, "apiserver.key"),
		"--service-account-key-file=" + filepath.Join(pkiDir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pkiDir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc." + cfg.dnsDomain,
		"--service-cluster-ip-range=" + cfg.serviceSubnet,
		"--authorization-mode=Node,RBAC",
		"--enable-bootstrap-token-auth=true",
		"--allow-privileged=true",
		"--profiling=false",
	}
	if err := startDaemon("kube-apiserver", apiserverBin, apiArgs); err != nil {
		return err
	}
	super, err := newAPIClient(cfg.localURL(), authority.certPEM, superCrt, superKey, "")
	if err != nil {
		return err
	}
	if err := retry(120*time.Second, "[wait-control-plane] wait for kube-apiserver /readyz", func(ctx context.Context) error {
		return super.get(ctx, "/readyz", nil)
	}); err != nil {
		return withLog(err, "kube-apiserver")
	}
	fmt.Printf("[wait-control-plane] kube-apiserver is ready at %s\n", cfg.localURL())
	if err := retry(60*time.Second, "[wait-control-plane] wait for namespace kube-system", func(ctx context.Context) error {
		return super.get(ctx, "/api/v1/namespaces/kube-system", nil)
	}); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := uploadConfig(ctx, super, cfg, authority); err != nil {
		return err
	}
	if err := bootstrapRBAC(ctx, super); err != nil {
		return err
	}
	if err := registerNode(ctx, super, cfg.node, true, cfg.advertise, cfg.kubernetesVer); err != nil {
		return fmt.Errorf("[kubelet-start] register Node %s: %w", cfg.node.Name, err)
	}
	fmt.Printf("[mark-control-plane] Node %s registered (Ready) with the control-plane label and taints\n", cfg.node.Name)

	files := map[string][]byte{
		filepath.Join(kubeDir, "admin.conf"): kubeconfig(cfg.clusterName, cfg.endpointURL(), authority.certPEM,
			"kubernetes-admin", adminCrt, adminKey, ""),
		filepath.Join(kubeDir, "super-admin.conf"): kubeconfig(cfg.clusterName, cfg.localURL(), authority.certPEM,
			"kubernetes-super-admin", superCrt, superKey, ""),
		filepath.Join(kubeDir, "kubelet.conf"): kubeconfig(cfg.clusterName, cfg.endpointURL(), authority.certPEM,
			"system:node:"+cfg.node.Name, kubeletCrt, kubeletKey, ""),
	}
	for p, b := range files {
		if err := writeFile(p, b, 0o600); err != nil {
			return err
		}
	}
	if err := writeKubeletFlags(cfg.node); err != nil {
		return err
	}
	if err := writeFile(nodeNameFile, []byte(cfg.node.Name+"\n"), 0o644); err != nil {
		return err
	}
	startKubelet()
	fmt.Printf("\nYour Kubernetes control-plane has initialized successfully! (simulated: etcd + kube-apiserver, no kubelet)\n")
	return nil
}

// uploadConfig creates kubeadm's ConfigMaps: kubeadm-config, kubelet-config and kube-public/cluster-info.
func uploadConfig(ctx context.Context, c *apiClient, cfg *clusterConfig, authority *ca) error {
	cc := map[string]any(cfg.raw)
	cc["kubernetesVersion"] = cfg.kubernetesVer
	cc["clusterName"] = cfg.clusterName
	cc["controlPlaneEndpoint"] = net.JoinHostPort(cfg.endpointHost, strconv.Itoa(cfg.endpointPort))
	if cc["certificatesDir"] == nil {
		cc["certificatesDir"] = pkiDir
	}
	net_, _ := cc["networking"].(map[string]any)
	if net_ == nil {
		net_ = map[string]any{}
	}
	net_["serviceSubnet"], net_["dnsDomain"] = cfg.serviceSubnet, cfg.dnsDomain
	cc["networking"] = net_
	ccYAML, err := yaml.Marshal(cc)
	if err != nil {
		return err
	}
	kubelet := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n" +
		"clusterDNS:\n- " + dnsIP(cfg.serviceSubnet) + "\nclusterDomain: " + cfg.dnsDomain + "\n"
	cms := []struct {
		ns, name string
		data     map[string]string
	}{
		{"kube-system", "kubeadm-config", map[string]string{"ClusterConfiguration": string(ccYAML)}},
		{"kube-system", "kubelet-config", map[string]string{"kubelet": kubelet}},
		{"kube-public", "cluster-info", map[string]string{"kubeconfig": string(kubeconfigNoUser(cfg.endpointURL(), authority.certPEM))}},
	}
	for _, cm := range cms {
		if err := c.create(ctx, "/api/v1/namespaces/"+cm.ns+"/configmaps", obj{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": obj{"name": cm.name, "namespace": cm.ns},
			"data":     cm.data,
		}); err != nil {
			return fmt.Errorf("[upload-config] %w", err)
		}
	}
	fmt.Println("[upload-config] Stored the configuration in ConfigMap kube-system/kubeadm-config; kubelet-config; kube-public/cluster-info")
	return nil
}

func dnsIP(serviceSubnet string) string {
	ip, err := firstServiceIP(serviceSubnet)
	if err != nil {
		return "10.96.0.10"
	}
	ip[len(ip)-1] += 9
	return ip.String()
}

func kubeconfigNoUser(server string, caPEM []byte) []byte {
	// cluster-info carries only the cluster entry, as kubeadm's does.
	return []byte("apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: " +
		base64.StdEncoding.EncodeToString(caPEM) + "\n    server: " + server + "\n  name: \"\"\n" +
		"contexts: null\ncurrent-context: \"\"\npreferences: {}\nusers: null\n")
}

// bootstrapRBAC creates kubeadm's bootstrap-token RBAC, plus the simulator's deviation: bootstrap tokens may
// create and update Nodes (real kubeadm join gets a kubelet client certificate through a CSR instead).
func bootstrapRBAC(ctx context.Context, c *apiClient) error {
	const rbac = "/apis/rbac.authorization.k8s.io/v1"
	subjects := func(kind string, names ...string) []any {
		var s []any
		for _, n := range names {
			s = append(s, obj{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": n})
		}
		return s
	}
	objs := []struct {
		path string
		o    obj
	}{
		{rbac + "/clusterrolebindings", obj{"metadata": obj{"name": "kubeadm:cluster-admins"},
			"roleRef":  obj{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
			"subjects": subjects("Group", "kubeadm:cluster-admins")}},
		{rbac + "/clusterroles", obj{"metadata": obj{"name": "kubeadm:get-nodes"},
			"rules": []any{obj{"apiGroups": []any{""}, "resources": []any{"nodes"}, "verbs": []any{"get"}}}}},
		{rbac + "/clusterrolebindings", obj{"metadata": obj{"name": "kubeadm:get-nodes"},
			"roleRef":  obj{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubeadm:get-nodes"},
			"subjects": subjects("Group", "system:bootstrappers:kubeadm:default-node-token")}},
		{rbac + "/clusterrolebindings", obj{"metadata": obj{"name": "kubeadm:kubelet-bootstrap"},
			"roleRef":  obj{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"},
			"subjects": subjects("Group", "system:bootstrappers:kubeadm:default-node-token")}},
		{rbac + "/namespaces/kube-public/roles", obj{"metadata": obj{"name": "kubeadm:bootstrap-signer-clusterinfo", "namespace": "kube-public"},
			"rules": []any{obj{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "resourceNames": []any{"cluster-info"}, "verbs": []any{"get"}}}}},
		{rbac + "/namespaces/kube-public/rolebindings", obj{"metadata": obj{"name": "kubeadm:bootstrap-signer-clusterinfo", "namespace": "kube-public"},
			"roleRef":  obj{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubeadm:bootstrap-signer-clusterinfo"},
			"subjects": subjects("User", "system:anonymous")}},
		{rbac + "/namespaces/kube-system/roles", obj{"metadata": obj{"name": "kubeadm:nodes-kubeadm-config", "namespace": "kube-system"},
			"rules": []any{obj{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "resourceNames": []any{"kubeadm-config", "kubelet-config"}, "verbs": []any{"get"}}}}},
		{rbac + "/namespaces/kube-system/rolebindings", obj{"metadata": obj{"name": "kubeadm:nodes-kubeadm-config", "namespace": "kube-system"},
			"roleRef":  obj{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubeadm:nodes-kubeadm-config"},
			"subjects": append(subjects("Group", "system:bootstrappers:kubeadm:default-node-token"), subjects("Group", "system:nodes")...)}},
		// Simulator deviation (see the package comment).
		{rbac + "/clusterroles", obj{"metadata": obj{"name": "kubeadm-sim:node-register"},
			"rules": []any{obj{"apiGroups": []any{""}, "resources": []any{"nodes", "nodes/status"},
				"verbs": []any{"get", "create", "patch", "update"}}}}},
		{rbac + "/clusterrolebindings", obj{"metadata": obj{"name": "kubeadm-sim:node-register"},
			"roleRef":  obj{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubeadm-sim:node-register"},
			"subjects": subjects("Group", "system:bootstrappers")}},
	}
	for _, o := range objs {
		if err := c.create(ctx, o.path, o.o); err != nil {
			return fmt.Errorf("[bootstrap-token] %w", err)
		}
	}
	fmt.Println("[bootstrap-token] Configured RBAC rules for bootstrap tokens (and node registration by token: simulator)")
	return nil
}

func writeKubeletFlags(nr nodeRegistration) error {
	var parts []string
	for k, v := range nr.ExtraArgs {
		parts = append(parts, "--"+k+"="+v)
	}
	return writeFile(filepath.Join(kubeletDir, "kubeadm-flags.env"),
		[]byte("KUBELET_KUBEADM_ARGS=\""+strings.Join(parts, " ")+"\"\n"), 0o644)
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, b, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// findBinary locates a control-plane binary shipped to this host.
func findBinary(name string) (string, error) {
	if p, ok, err := extractEmbedded(name); ok || err != nil {
		return p, err
	}
	var dirs []string
	if d := os.Getenv("KUBEADM_SIM_BIN_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	if self, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(self))
	}
	dirs = append(dirs, "/usr/local/bin", "/usr/bin")
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("[preflight] %s not found in %v: the binary service must ship it to this host", name, dirs)
}

// startDaemon starts a detached process (own session, output to a log file) and records its pid.
func startDaemon(name, bin string, args []string) error {
	logf, err := os.OpenFile(filepath.Join(simDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open %s log: %w", name, err)
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	if err := writeFile(filepath.Join(simDir, name+".pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("[control-plane] started %s (pid %d)\n", name, pid)
	return nil
}

func withLog(err error, name string) error {
	b, _ := os.ReadFile(filepath.Join(simDir, name+".log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return fmt.Errorf("%w\n--- last lines of %s/%s.log ---\n%s", err, simDir, name, strings.Join(lines, "\n"))
}

func httpOK(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}
