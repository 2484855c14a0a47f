// Command mgmtctl starts and stops the local Cluster API management plane used by the capkk-rs tests:
// etcd and kube-apiserver on loopback with generated certificates, kube-controller-manager (garbage
// collector and namespace controllers only), the CAPI CRDs with their conversion
// webhooks and the CAPI webhook configurations pointed at https://127.0.0.1:<port> URLs, and the CAPI core,
// kubeadm bootstrap (CABPK) and kubeadm control plane (KCP) managers as local processes.
//
// Usage:
//
//	mgmtctl up     --state-dir DIR --bin-dir DIR --capi-src DIR [--etcd PATH] [--kube-apiserver PATH]
//	mgmtctl down   --state-dir DIR
//	mgmtctl status --state-dir DIR
//
// Every process it starts is recorded in DIR/run/<name>.pid; down stops only those processes (and only if
// their command line still names DIR). up is idempotent: a healthy plane is left alone, missing or dead
// components are (re)started, a plane whose etcd is gone is rebuilt from scratch.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Loopback ports of the management plane (documented in ../README.md); --port-offset shifts all of them.
var (
	etcdClientPort = 22379
	etcdPeerPort   = 22380
	apiserverPort  = 26443
	kcmPort        = 26444
)

// applyPortOffset shifts every port by offset.
func applyPortOffset(offset int) {
	for _, p := range []*int{&etcdClientPort, &etcdPeerPort, &apiserverPort, &kcmPort} {
		*p += offset
	}
	for i := range managers {
		managers[i].webhookPort += offset
		managers[i].healthPort += offset
		managers[i].diagPort += offset
	}
}

// portOffset returns the offset to use: the flag when given (recorded in the state dir by up), else the
// recorded one, else 0.
func portOffset(stateDir string, flagValue int, record bool) (int, error) {
	path := filepath.Join(stateDir, "port-offset")
	if flagValue < 0 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, nil
		}
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if flagValue > 10000 {
		return 0, fmt.Errorf("--port-offset %d is too large (max 10000)", flagValue)
	}
	if record {
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != strconv.Itoa(flagValue) {
			for _, n := range componentNames() {
				if running(stateDir, n) {
					return 0, fmt.Errorf("the plane in %s runs with port offset %s, not %d: run down first",
						stateDir, strings.TrimSpace(string(b)), flagValue)
				}
			}
		}
		return flagValue, os.WriteFile(path, []byte(strconv.Itoa(flagValue)+"\n"), 0o644)
	}
	return flagValue, nil
}

// manager describes one CAPI manager process and the parts of the CAPI source tree it serves.
type manager struct {
	name        string // process name (pidfile, log file)
	binary      string // file name in --bin-dir
	provider    string // value of the cluster.x-k8s.io/provider label
	namePrefix  string // kustomize namePrefix of the provider's config/default
	configDir   string // directory in the CAPI module holding crd/ and webhook/
	webhookPort int
	healthPort  int
	diagPort    int
}

var managers = []manager{
	{"capi-core", "cluster-api-controller", "cluster-api", "capi-", "core/config", 29443, 28440, 28443},
	{"capi-kubeadm-bootstrap", "kubeadm-bootstrap-controller", "bootstrap-kubeadm", "capi-kubeadm-bootstrap-",
		"bootstrap/kubeadm/config", 29444, 28441, 28444},
	{"capi-kubeadm-control-plane", "kubeadm-control-plane-controller", "control-plane-kubeadm",
		"capi-kubeadm-control-plane-", "controlplane/kubeadm/config", 29445, 28442, 28445},
}

type options struct {
	stateDir      string
	binDir        string
	etcdBin       string
	apiserverBin  string
	kcmBin        string
	capiSrc       string
	featureGates  string
	timeout       time.Duration
	managerLogLvl int
	portOffset    int
	bare          bool
}

// bare: this plane runs etcd, kube-apiserver and kube-controller-manager only, no CAPI, for a test that installs
// CAPI itself (the Cluster API Operator's CoreProvider, controllers/tests/operator_install.rs). Recorded in the
// state directory by up, so that down and status know the plane's components.
var bare bool

func bareMode(stateDir string, flagValue, record bool) (bool, error) {
	path := filepath.Join(stateDir, "bare")
	if record {
		if !flagValue {
			return false, os.RemoveAll(path)
		}
		return true, os.WriteFile(path, []byte("true\n"), 0o644)
	}
	_, err := os.Stat(path)
	return err == nil, nil
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd := os.Args[1]
	if cmd == "runtime-extension" {
		runtimeExtension(os.Args[2:])
		return
	}
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	var o options
	fs.StringVar(&o.stateDir, "state-dir", "", "state directory (certs, etcd data, kubeconfig, logs, pidfiles)")
	fs.StringVar(&o.binDir, "bin-dir", "", "directory holding the CAPI manager binaries (and etcd, kube-apiserver)")
	fs.StringVar(&o.etcdBin, "etcd", "", "etcd binary (default: <bin-dir>/etcd)")
	fs.StringVar(&o.apiserverBin, "kube-apiserver", "", "kube-apiserver binary (default: <bin-dir>/kube-apiserver)")
	fs.StringVar(&o.kcmBin, "kube-controller-manager", "",
		"kube-controller-manager binary (default: <bin-dir>/kube-controller-manager)")
	fs.StringVar(&o.capiSrc, "capi-src", "", "Cluster API module source directory (CRDs and webhook manifests)")
	// InPlaceUpdates + RuntimeSDK: CAPI's in-place update extension (docs/upgrades.md). Without a registered
	// ExtensionConfig they change nothing: CAPI only calls hooks an ExtensionConfig registers, and tests that
	// register one select their own namespace.
	fs.StringVar(&o.featureGates, "feature-gates",
		"ClusterTopology=true,MachinePool=true,InPlaceUpdates=true,RuntimeSDK=true",
		"feature gates passed to the CAPI managers")
	fs.DurationVar(&o.timeout, "timeout", 4*time.Minute, "how long up waits for the plane to become ready")
	fs.IntVar(&o.managerLogLvl, "manager-v", 2, "klog verbosity of the CAPI managers")
	fs.BoolVar(&o.bare, "bare", false,
		"up: etcd, kube-apiserver and kube-controller-manager (with the deployment controllers) only, no CAPI")
	fs.IntVar(&o.portOffset, "port-offset", -1,
		"added to every port (to run a second plane); default: the offset recorded by up, else 0")
	_ = fs.Parse(os.Args[2:])
	if o.stateDir == "" {
		fatalf("--state-dir is required")
	}
	abs, err := filepath.Abs(o.stateDir)
	if err != nil {
		fatalf("state dir %q: %v", o.stateDir, err)
	}
	o.stateDir = abs
	if err := os.MkdirAll(o.stateDir, 0o755); err != nil {
		fatalf("create state dir: %v", err)
	}
	unlock, err := lock(filepath.Join(o.stateDir, "lock"))
	if err != nil {
		fatalf("lock state dir: %v", err)
	}
	defer unlock()
	offset, err := portOffset(o.stateDir, o.portOffset, cmd == "up")
	if err != nil {
		unlock()
		fatalf("port offset: %v", err)
	}
	applyPortOffset(offset)
	if bare, err = bareMode(o.stateDir, o.bare, cmd == "up"); err != nil {
		unlock()
		fatalf("bare mode: %v", err)
	}

	switch cmd {
	case "up":
		if o.binDir == "" || o.capiSrc == "" {
			fatalf("up needs --bin-dir and --capi-src")
		}
		if o.etcdBin == "" {
			o.etcdBin = filepath.Join(o.binDir, "etcd")
		}
		if o.apiserverBin == "" {
			o.apiserverBin = filepath.Join(o.binDir, "kube-apiserver")
		}
		if o.kcmBin == "" {
			o.kcmBin = filepath.Join(o.binDir, "kube-controller-manager")
		}
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		defer cancel()
		start := time.Now()
		if err := up(ctx, &o); err != nil {
			unlock()
			fatalf("mgmt up: %v", err)
		}
		logf("management plane ready in %s; KUBECONFIG=%s", time.Since(start).Round(100*time.Millisecond),
			kubeconfigPath(o.stateDir))
	case "down":
		if err := down(o.stateDir); err != nil {
			unlock()
			fatalf("mgmt down: %v", err)
		}
	case "status":
		if !status(o.stateDir) {
			unlock()
			os.Exit(1)
		}
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: mgmtctl up|down|status --state-dir DIR [--bin-dir DIR --capi-src DIR ...]\n"+
		"       mgmtctl runtime-extension --out DIR --url https://HOST:PORT [--name NAME] [--namespace NS]")
	os.Exit(2)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mgmtctl: "+format+"\n", args...)
}

func fatalf(format string, args ...any) {
	logf(format, args...)
	os.Exit(1)
}

// lock takes an exclusive flock on path, so that concurrent up/down calls (e.g. several test binaries)
// serialize.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	done := false
	return func() {
		if !done {
			done = true
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			f.Close()
		}
	}, nil
}

func kubeconfigPath(stateDir string) string { return filepath.Join(stateDir, "kubeconfig") }
func pkiDir(stateDir string) string         { return filepath.Join(stateDir, "pki") }

// components lists every process in start order.
func componentNames() []string {
	names := []string{"etcd", "kube-apiserver", "kube-controller-manager"}
	if bare {
		return names
	}
	for _, m := range managers {
		names = append(names, m.name)
	}
	return names
}

func up(ctx context.Context, o *options) error {
	for _, b := range append([]string{o.etcdBin, o.apiserverBin, o.kcmBin}, managerBins(o)...) {
		if st, err := os.Stat(b); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("binary %s is missing or not executable (run `make mgmt-bin`)", b)
		}
	}
	if _, err := os.Stat(filepath.Join(o.capiSrc, "core", "config", "crd")); err != nil && !bare {
		return fmt.Errorf("--capi-src %s does not look like the Cluster API module: %v", o.capiSrc, err)
	}

	// Fast path: everything already runs and answers.
	if allRunning(o.stateDir) {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := checkReady(qctx, o.stateDir)
		cancel()
		if err == nil {
			if prev, _ := os.ReadFile(filepath.Join(o.stateDir, "bin-dir")); len(prev) > 0 &&
				strings.TrimSpace(string(prev)) != o.binDir {
				logf("note: the running plane uses binaries from %s, not %s; `make mgmt-down mgmt-up` switches",
					strings.TrimSpace(string(prev)), o.binDir)
			}
			for _, m := range managers {
				if bare {
					break
				}
				pid, _ := pidOf(o.stateDir, m.name)
				cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				if !bytes.Contains(cmdline, []byte("--feature-gates="+o.featureGates+"\x00")) {
					logf("note: %s runs with other feature gates than %s; `make mgmt-down mgmt-up` switches",
						m.name, o.featureGates)
				}
			}
			caBundle, err := os.ReadFile(filepath.Join(pkiDir(o.stateDir), "ca.crt"))
			if err != nil {
				return err
			}
			kc, err := newKubeClient(o.stateDir)
			if err != nil {
				return err
			}
			// No-op unless the CAPI manifests or their rendering changed since the last up.
			if bare {
				logf("bare management plane already running (state %s)", o.stateDir)
				return nil
			}
			if err := installCAPI(ctx, kc, o.stateDir, o.capiSrc, caBundle); err != nil {
				return fmt.Errorf("install CAPI CRDs and webhooks: %w", err)
			}
			logf("management plane already running (state %s)", o.stateDir)
			return nil
		}
		logf("management plane processes run but are not ready (%v); repairing", err)
	}

	fresh := !running(o.stateDir, "etcd")
	if fresh {
		logf("starting a fresh management plane in %s", o.stateDir)
		// Stop leftovers of an earlier plane whose etcd died, then wipe its state (logs are kept).
		if err := stopAll(o.stateDir); err != nil {
			return err
		}
		for _, d := range []string{"etcd", "pki", "run", "kubeconfig", "capi-installed", "bin-dir"} {
			if err := os.RemoveAll(filepath.Join(o.stateDir, d)); err != nil {
				return err
			}
		}
		if err := generatePKI(pkiDir(o.stateDir)); err != nil {
			return fmt.Errorf("generate certificates: %w", err)
		}
		if err := writeKubeconfig(o.stateDir); err != nil {
			return fmt.Errorf("write kubeconfig: %w", err)
		}
		if err := os.WriteFile(filepath.Join(o.stateDir, "bin-dir"), []byte(o.binDir+"\n"), 0o644); err != nil {
			return err
		}
	}

	if !running(o.stateDir, "etcd") {
		if err := startProcess(o.stateDir, "etcd", o.etcdBin, etcdArgs(o.stateDir)); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, o.stateDir, "etcd", etcdReady); err != nil {
		return err
	}
	if !running(o.stateDir, "kube-apiserver") {
		if err := startProcess(o.stateDir, "kube-apiserver", o.apiserverBin, apiserverArgs(o.stateDir)); err != nil {
			return err
		}
	}
	kc, err := newKubeClient(o.stateDir)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, o.stateDir, "kube-apiserver", kc.ready); err != nil {
		return err
	}

	// The garbage collector (ownerReference cascades) and namespace deletion; not awaited here, see below.
	if !running(o.stateDir, "kube-controller-manager") {
		if err := startProcess(o.stateDir, "kube-controller-manager", o.kcmBin, kcmArgs(o.stateDir)); err != nil {
			return err
		}
	}

	if bare {
		return waitFor(ctx, o.stateDir, "kube-controller-manager", kcmReady)
	}
	caBundle, err := os.ReadFile(filepath.Join(pkiDir(o.stateDir), "ca.crt"))
	if err != nil {
		return err
	}
	if err := installCAPI(ctx, kc, o.stateDir, o.capiSrc, caBundle); err != nil {
		return fmt.Errorf("install CAPI CRDs and webhooks: %w", err)
	}

	for _, m := range managers {
		if !running(o.stateDir, m.name) {
			if err := startProcess(o.stateDir, m.name, filepath.Join(o.binDir, m.binary),
				managerArgs(o, m)); err != nil {
				return err
			}
		}
	}
	if err := waitFor(ctx, o.stateDir, "kube-controller-manager", kcmReady); err != nil {
		return err
	}
	for _, m := range managers {
		if err := waitFor(ctx, o.stateDir, m.name, managerReady(o.stateDir, m)); err != nil {
			return err
		}
	}
	// The managers answer; now prove that the apiserver reaches their webhooks with our CA bundle.
	if err := waitFor(ctx, o.stateDir, "capi-core", kc.webhooksAnswer); err != nil {
		return err
	}
	return nil
}

func managerBins(o *options) []string {
	var bins []string
	if bare {
		return nil
	}
	for _, m := range managers {
		bins = append(bins, filepath.Join(o.binDir, m.binary))
	}
	return bins
}

func etcdArgs(stateDir string) []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", etcdClientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort)
	return []string{
		"--name=capkk-mgmt",
		"--data-dir=" + filepath.Join(stateDir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=capkk-mgmt=" + peer,
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=4294967296",
		"--log-level=warn",
	}
}

func apiserverArgs(stateDir string) []string {
	pki := pkiDir(stateDir)
	return []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClientPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiserverPort),
		"--cert-dir=" + filepath.Join(pki, "apiserver-certdir"),
		"--tls-cert-file=" + filepath.Join(pki, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(pki, "apiserver.key"),
		"--client-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--service-account-key-file=" + filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pki, "sa.key"),
		fmt.Sprintf("--service-account-issuer=https://127.0.0.1:%d", apiserverPort),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--authorization-mode=RBAC",
		"--disable-admission-plugins=ServiceAccount",
		"--profiling=false",
	}
}

func kcmArgs(stateDir string) []string {
	controllers := "garbagecollector,namespace"
	if bare {
		// Deployment status (the Available condition the Cluster API Operator reads for a provider's Ready) is
		// the deployment controller's; Pods are still never scheduled nor run.
		controllers += ",deployment,replicaset"
	}
	return []string{
		"--kubeconfig=" + kubeconfigPath(stateDir),
		"--authentication-kubeconfig=" + kubeconfigPath(stateDir),
		"--authorization-kubeconfig=" + kubeconfigPath(stateDir),
		"--controllers=" + controllers,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", kcmPort),
		"--cert-dir=" + filepath.Join(pkiDir(stateDir), "kcm-certdir"),
		"--use-service-account-credentials=false",
		"--profiling=false",
	}
}

func managerArgs(o *options, m manager) []string {
	return []string{
		"--kubeconfig=" + kubeconfigPath(o.stateDir),
		"--leader-elect=false",
		fmt.Sprintf("--webhook-port=%d", m.webhookPort),
		"--webhook-cert-dir=" + filepath.Join(pkiDir(o.stateDir), "webhook"),
		fmt.Sprintf("--health-addr=127.0.0.1:%d", m.healthPort),
		fmt.Sprintf("--diagnostics-address=127.0.0.1:%d", m.diagPort),
		"--insecure-diagnostics=true",
		"--feature-gates=" + o.featureGates,
		fmt.Sprintf("--v=%d", o.managerLogLvl),
	}
}

// stillRunning is running, confirmed: a single negative reading is checked again over a second before the
// component counts as gone. CI once saw etcd reported "exited during startup" while it was alive and
// listening (a transient /proc reading under load); one bad read must not fail a plane that is starting.
func stillRunning(stateDir, name string) bool {
	for i := 0; i < 4; i++ {
		if running(stateDir, name) {
			return true
		}
		time.Sleep(300 * time.Millisecond)
	}
	return false
}

// waitFor polls check until it succeeds, the context ends, or the process dies.
func waitFor(ctx context.Context, stateDir, name string, check func(context.Context) error) error {
	var last error
	for {
		if !stillRunning(stateDir, name) {
			return fmt.Errorf("%s exited during startup; last log lines of %s:\n%s", name,
				logPath(stateDir, name), tail(logPath(stateDir, name), 40))
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %v; last log lines of %s:\n%s", name, last,
				logPath(stateDir, name), tail(logPath(stateDir, name), 40))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func allRunning(stateDir string) bool {
	for _, n := range componentNames() {
		if !running(stateDir, n) {
			return false
		}
	}
	return true
}

func checkReady(ctx context.Context, stateDir string) error {
	if err := etcdReady(ctx); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	kc, err := newKubeClient(stateDir)
	if err != nil {
		return err
	}
	if err := kc.ready(ctx); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	if err := kcmReady(ctx); err != nil {
		return fmt.Errorf("kube-controller-manager: %w", err)
	}
	if bare {
		return nil
	}
	for _, m := range managers {
		if err := managerReady(stateDir, m)(ctx); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return kc.webhooksAnswer(ctx)
}

func status(stateDir string) bool {
	ok := true
	for _, n := range componentNames() {
		pid, alive := pidOf(stateDir, n)
		state := "stopped"
		if alive {
			state = fmt.Sprintf("running (pid %d)", pid)
		} else {
			ok = false
		}
		fmt.Printf("%-28s %s\n", n, state)
	}
	if ok {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := checkReady(ctx, stateDir); err != nil {
			fmt.Printf("not ready: %v\n", err)
			return false
		}
		fmt.Printf("ready; KUBECONFIG=%s\n", kubeconfigPath(stateDir))
	}
	return ok
}

func down(stateDir string) error {
	if err := stopAll(stateDir); err != nil {
		return err
	}
	var errs []error
	for _, d := range []string{"etcd", "pki", "run", "kubeconfig", "capi-installed", "bin-dir"} {
		errs = append(errs, os.RemoveAll(filepath.Join(stateDir, d)))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logf("management plane stopped; logs kept in %s", filepath.Join(stateDir, "logs"))
	return nil
}

func stopAll(stateDir string) error {
	names := componentNames()
	var errs []error
	for i := len(names) - 1; i >= 0; i-- {
		errs = append(errs, stopProcess(stateDir, names[i]))
	}
	return errors.Join(errs...)
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
