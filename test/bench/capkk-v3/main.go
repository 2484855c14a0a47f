// Command capkk-v3-driver runs the bench workload (test/bench, docs/benchmarks.md) the way KubeKey's CAPKK v3
// (github.com/kubesphere/kubekey/v3, v3.1.12) provisions a KKInstance, through CAPKK's own packages, imported
// unchanged:
//
//   - pkg/clients/ssh: Ping first (reconcilePing tries three times), then every command through SudoCmd (a new
//     TCP+SSH connection and a PTY session per call, `sudo -E /bin/bash <<EOF`), files through Copy (SFTP with
//     an MD5 round trip);
//   - pkg/service/binary and pkg/service/containermanager (when the job has "services"): CAPKK's real binary
//     and containerd services against the bench's artifact mirror (KKCluster spec.component.host +
//     overrides with checksums), i.e. download on the controller, SHA-256 check, Copy, chmod +x, templates;
//   - pkg/service/provisioning: the bootstrap data through RawBootstrapDataToProvisioningCommands, one SudoCmd
//     per command, as reconcileProvisioning does.
//
// Usage:
//
//	capkk-v3-driver -job job.json         run the job, print a JSON result on stdout
//	capkk-v3-driver -job job.json -urls   print the artifact URLs CAPKK would download (one per line)
//
// The job is written by capkk-bench (test/bench/src/capkk_v3.rs). Nothing here talks to a Kubernetes API: the
// scopes CAPKK's services read are filled from the job.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/pkg/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/v1beta1"
	bootstrapv1 "sigs.k8s.io/cluster-api/bootstrap/kubeadm/api/v1beta1"
	capicollections "sigs.k8s.io/cluster-api/util/collections"

	infrav1 "github.com/kubesphere/kubekey/v3/api/v1beta1"
	"github.com/kubesphere/kubekey/v3/pkg/clients/ssh"
	"github.com/kubesphere/kubekey/v3/pkg/rootfs"
	"github.com/kubesphere/kubekey/v3/pkg/scope"
	"github.com/kubesphere/kubekey/v3/pkg/service/binary"
	"github.com/kubesphere/kubekey/v3/pkg/service/containermanager"
	"github.com/kubesphere/kubekey/v3/pkg/service/operation"
	"github.com/kubesphere/kubekey/v3/pkg/service/operation/directory"
	"github.com/kubesphere/kubekey/v3/pkg/service/operation/file"
	"github.com/kubesphere/kubekey/v3/pkg/service/operation/file/checksum"
	"github.com/kubesphere/kubekey/v3/pkg/service/provisioning"
)

// Job is what capkk-bench asks for.
type Job struct {
	// User, Key, Port: SSH login of every host (key file on the controller).
	User string `json:"user"`
	Key  string `json:"key"`
	Port int    `json:"port"`
	// WorkDir is this run's controller-side scratch: CAPKK's rootfs (downloads, rendered templates) and the
	// files Copy uploads. A fresh directory per run, so every run downloads (cold cache).
	WorkDir string `json:"work_dir"`
	// Hosts are provisioned concurrently, one goroutine each.
	Hosts []Host `json:"hosts"`
	// Services, when set, runs CAPKK's binary and containerd services after the ops.
	Services *Services `json:"services,omitempty"`
	// Retries is how often a failed phase is run again (a requeued reconcile), with controller-runtime's
	// per-item exponential backoff starting at 5 ms.
	Retries int `json:"retries"`
}

// Host is one KKInstance.
type Host struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// Ops run first, in order (the facts probe and bootstrap script capkk-rs sent, and the stand-in steps
	// when the job has no services).
	Ops []Op `json:"ops"`
	// BootstrapData is the cloud-config file this host is provisioned with; empty: no provisioning phase.
	BootstrapData string `json:"bootstrap_data,omitempty"`
}

// Op is one unit of the bench workload (the JSON of capkk-bench's workload::Op).
type Op struct {
	Kind    string  `json:"kind"`
	Command string  `json:"command,omitempty"`
	Stdin   []byte  `json:"stdin,omitempty"`
	Path    string  `json:"path,omitempty"`
	Content []byte  `json:"content,omitempty"`
	Mode    uint32  `json:"mode,omitempty"`
	Owner   *string `json:"owner,omitempty"`
}

// Services configures CAPKK's binary and containerd services (KKCluster spec.component, KKInstance spec).
type Services struct {
	// Mirror is spec.component.host: every download URL keeps CAPKK's path on this host.
	Mirror            string `json:"mirror"`
	KubernetesVersion string `json:"kubernetes_version"`
	Arch              string `json:"arch"`
	ContainerdVersion string `json:"containerd_version"`
	CrictlVersion     string `json:"crictl_version"`
	CRISocket         string `json:"cri_socket"`
	// Overrides are spec.component.overrides: the stand-in artifacts' SHA-256 per id/version/arch.
	Overrides []infrav1.Override `json:"overrides"`
}

// Step is one timed call.
type Step struct {
	Label string  `json:"label"`
	S     float64 `json:"s"`
}

// HostResult is what happened on one host.
type HostResult struct {
	Steps   []Step `json:"steps"`
	Retries int    `json:"retries"`
	Error   string `json:"error,omitempty"`
}

// Result is printed on stdout.
type Result struct {
	WallS float64               `json:"wall_s"`
	Hosts map[string]HostResult `json:"hosts"`
}

func main() {
	jobPath := flag.String("job", "", "job file written by capkk-bench")
	urls := flag.Bool("urls", false, "print the artifact URLs CAPKK downloads for this job and exit")
	flag.Parse()
	if *jobPath == "" {
		fail(errors.New("-job is required"))
	}
	raw, err := os.ReadFile(*jobPath)
	if err != nil {
		fail(err)
	}
	var job Job
	if err := json.Unmarshal(raw, &job); err != nil {
		fail(errors.Wrapf(err, "parsing %s", *jobPath))
	}
	if job.Services != nil {
		unpinStandIns(job.Services)
	}
	if *urls {
		if err := printURLs(&job); err != nil {
			fail(err)
		}
		return
	}
	res := run(&job)
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	for _, h := range res.Hosts {
		if h.Error != "" {
			os.Exit(1)
		}
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "capkk-v3-driver: %v\n", err)
	os.Exit(2)
}

// unpinStandIns removes the bench's artifact versions from CAPKK's embedded checksum table
// (checksum.FileSha256, an exported variable parsed from version/components.json). The bench serves
// stand-in artifacts; where CAPKK knows the real release's digest (its CNI version is fixed at v1.2.0, for
// example) it would reject them. Without the entry CAPKK falls back to the override's checksum, as it does for
// every version it does not know. CAPKK's code is unchanged.
func unpinStandIns(s *Services) {
	for _, o := range s.Overrides {
		if byArch, ok := checksum.FileSha256[o.ID]; ok {
			if byVersion, ok := byArch[o.Arch]; ok {
				delete(byVersion, o.Version)
			}
		}
	}
}

func run(job *Job) Result {
	start := time.Now()
	res := Result{Hosts: map[string]HostResult{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range job.Hosts {
		h := &job.Hosts[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := provisionHost(job, h)
			mu.Lock()
			res.Hosts[h.Name] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.WallS = time.Since(start).Seconds()
	return res
}

func newClient(job *Job, h *Host) ssh.Interface {
	log := logr.Discard()
	port := job.Port
	timeout := time.Duration(ssh.DefaultTimeout) * time.Second
	return ssh.NewClient(h.Address, infrav1.Auth{
		User:           job.User,
		PrivateKeyPath: job.Key,
		Port:           &port,
		Timeout:        &timeout,
	}, &log)
}

// provisionHost runs the KKInstance phases CAPKK runs, in its order.
func provisionHost(job *Job, h *Host) (r HostResult) {
	client := newClient(job, h)
	local := filepath.Join(job.WorkDir, h.Name)
	timed := func(label string, f func() error) error {
		t := time.Now()
		err := f()
		r.Steps = append(r.Steps, Step{Label: label, S: time.Since(t).Seconds()})
		return err
	}
	// A phase that fails is run again, like a requeued reconcile.
	phase := func(label string, f func() error) error {
		var err error
		for attempt := 0; ; attempt++ {
			if err = timed(label, f); err == nil || attempt >= job.Retries {
				return err
			}
			r.Retries++
			time.Sleep((5 * time.Millisecond) << attempt)
		}
	}
	err := func() error {
		if err := os.MkdirAll(local, 0o700); err != nil {
			return err
		}
		// reconcilePing: up to three tries.
		if err := timed("ping", func() error {
			var err error
			for i := 0; i < 3; i++ {
				if err = client.Ping(); err == nil {
					return nil
				}
			}
			return err
		}); err != nil {
			return errors.Wrap(err, "ping")
		}
		for i, op := range h.Ops {
			if err := timed(op.label(i), func() error { return runOp(client, local, i, op) }); err != nil {
				return errors.Wrapf(err, "step %d (%s)", i+1, op.label(i))
			}
		}
		if job.Services != nil {
			kk, inst := scopes(job, h)
			if err := phase("binary service (CAPKK pkg/service/binary)", func() error {
				svc := binary.NewService(client, kk, inst, infrav1.KUBERNETES)
				return svc.Download(5 * time.Minute)
			}); err != nil {
				return errors.Wrap(err, "binary service")
			}
			if err := phase("container manager (CAPKK pkg/service/containermanager)", func() error {
				svc := containermanager.NewService(client, kk, inst)
				if svc.IsExist() {
					return nil
				}
				if err := svc.Get(5 * time.Minute); err != nil {
					return err
				}
				return svc.Install()
			}); err != nil {
				return errors.Wrap(err, "container manager")
			}
		}
		// A host without bootstrap data stops after the services (the real-VM bench: no control plane for
		// kubeadm to init or join).
		if h.BootstrapData == "" {
			return nil
		}
		data, err := os.ReadFile(h.BootstrapData)
		if err != nil {
			return err
		}
		svc := provisioning.NewService(client, bootstrapv1.CloudConfig)
		cmds, err := svc.RawBootstrapDataToProvisioningCommands(data)
		if err != nil {
			return errors.Wrap(err, "parsing the bootstrap data")
		}
		if len(cmds) == 0 {
			return errors.New("CAPKK derived no commands from the bootstrap data")
		}
		for i, c := range cmds {
			cmd := c.String()
			if err := timed(fmt.Sprintf("provisioning %d: %s", i+1, short(cmd)), func() error {
				_, err := client.SudoCmd(cmd)
				return err
			}); err != nil {
				return errors.Wrapf(err, "provisioning command %d", i+1)
			}
		}
		return nil
	}()
	if err != nil {
		r.Error = fmt.Sprintf("%s: %v", h.Name, err)
	}
	return r
}

func short(s string) string {
	s = strings.TrimSpace(strings.SplitN(s, "\n", 2)[0])
	if len(s) > 50 {
		return s[:50] + "…"
	}
	return s
}

func (op Op) label(i int) string {
	if op.Kind == "put" {
		return fmt.Sprintf("op %d: put %s (%d bytes)", i+1, op.Path, len(op.Content))
	}
	return fmt.Sprintf("op %d: exec %s", i+1, short(op.Command))
}

// heredocSafe makes cmd survive CAPKK's SudoPrefix (`sudo -E /bin/bash <<EOF`): the here-document is
// unquoted, so the login shell would expand `$`, backquotes and backslashes in it before bash sees the command.
// CAPKK's own commands avoid these characters; the bench's service scripts use them.
func heredocSafe(cmd string) string {
	r := strings.NewReplacer(`\`, `\\`, `$`, `\$`, "`", "\\`")
	return r.Replace(cmd)
}

// runOp performs one workload op the way CAPKK performs the same kind of work: a command through SudoCmd; a
// script fed on stdin as CAPKK runs its own scripts (initOS.sh: rendered locally, Copy to
// /usr/local/bin/kube-scripts, then run through SudoCmd); a file through Copy (mode from the local file), then
// chown through SudoCmd when the owner is not root.
func runOp(client ssh.Interface, local string, i int, op Op) error {
	switch op.Kind {
	case "exec":
		cmd := op.Command
		if op.Stdin != nil {
			src := filepath.Join(local, fmt.Sprintf("op-%d.stdin", i+1))
			dst := filepath.Join(directory.KubeScriptDir, fmt.Sprintf("capkk-bench-op-%d.stdin", i+1))
			if err := writeLocal(src, op.Stdin, 0o600); err != nil {
				return err
			}
			if err := client.Copy(src, dst); err != nil {
				return err
			}
			cmd = fmt.Sprintf("%s < %s", cmd, dst)
		}
		_, err := client.SudoCmd(heredocSafe(cmd))
		return err
	case "put":
		src := filepath.Join(local, fmt.Sprintf("op-%d.put", i+1))
		if err := writeLocal(src, op.Content, os.FileMode(op.Mode&0o7777)); err != nil {
			return err
		}
		if err := client.Copy(src, op.Path); err != nil {
			return err
		}
		if op.Owner != nil && *op.Owner != "" && *op.Owner != "root:root" && *op.Owner != "root" {
			if _, err := client.SudoCmdf("chown %s %s", *op.Owner, op.Path); err != nil {
				return err
			}
		}
		return nil
	default:
		return errors.Errorf("unknown op kind %q", op.Kind)
	}
}

func writeLocal(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	// os.WriteFile applies the umask; Copy gives the remote file the local file's mode.
	return os.Chmod(path, mode)
}

// printURLs prints what CAPKK's services download for this job, one `id version url` per line (the bench mirror
// serves exactly these paths, and the overrides carry a checksum for each id and version).
func printURLs(job *Job) error {
	s := job.Services
	if s == nil {
		return errors.New("the job has no services")
	}
	fs := rootfs.NewLocalRootFs("bench", filepath.Join(job.WorkDir, "urls"))
	client := ssh.NewClient("0.0.0.0", infrav1.Auth{}, nil)
	bins := []struct{ id, version string }{
		{file.KubeadmID, s.KubernetesVersion},
		{file.KubeletID, s.KubernetesVersion},
		{file.KubectlID, s.KubernetesVersion},
		// CAPKK v3 fixes these two versions (binary/kubernetes DownloadAll, containermanager Get).
		{file.KubecniID, file.KubecniDefaultVersion},
		{file.RuncID, file.RuncDefaultVersion},
		{file.ContainerdID, s.ContainerdVersion},
		{file.CrictlID, s.CrictlVersion},
	}
	for _, b := range bins {
		bin, err := newBinary(client, fs, b.id, b.version, s.Arch)
		if err != nil {
			return err
		}
		// DownloadAndCopy with a component host and no zone: SetHost keeps CAPKK's path.
		bin.SetHost(s.Mirror)
		fmt.Printf("%s %s %s\n", b.id, b.version, bin.URL().String())
	}
	return nil
}

func newBinary(c ssh.Interface, fs rootfs.Interface, id, version, arch string) (operation.Binary, error) {
	switch id {
	case file.KubeadmID:
		return file.NewKubeadm(c, fs, version, arch)
	case file.KubeletID:
		return file.NewKubelet(c, fs, version, arch)
	case file.KubectlID:
		return file.NewKubectl(c, fs, version, arch)
	case file.KubecniID:
		return file.NewKubecni(c, fs, version, arch)
	case file.RuncID:
		return file.NewRunc(c, fs, version, arch)
	case file.ContainerdID:
		return file.NewContainerd(c, fs, version, arch)
	case file.CrictlID:
		return file.NewCrictl(c, fs, version, arch)
	}
	return nil, errors.Errorf("unknown binary %q", id)
}

// kkScope is the KKInstanceScope (cluster side) CAPKK's services read: component host and overrides, the
// cluster rootfs. The methods that would need a Kubernetes API are not reached by the binary and containerd
// services and fail if they are.
type kkScope struct {
	logr.Logger
	services *Services
	fs       rootfs.Interface
}

var errNoAPI = errors.New("capkk-v3-driver: no Kubernetes API in the bench")

func (s *kkScope) ControllerName() string        { return "capkk-v3-bench" }
func (s *kkScope) Name() string                  { return "bench" }
func (s *kkScope) Namespace() string             { return "bench" }
func (s *kkScope) InfraClusterName() string      { return "bench" }
func (s *kkScope) KubernetesClusterName() string { return "bench" }
func (s *kkScope) GetKKMachines(context.Context) (*infrav1.KKMachineList, error) {
	return nil, errNoAPI
}
func (s *kkScope) GetMachines(context.Context, ...capicollections.Func) (capicollections.Machines, error) {
	return nil, errNoAPI
}
func (s *kkScope) Distribution() string                   { return infrav1.KUBERNETES }
func (s *kkScope) RootFs() rootfs.Interface               { return s.fs }
func (s *kkScope) PatchObject() error                     { return nil }
func (s *kkScope) Close() error                           { return nil }
func (s *kkScope) ComponentZone() string                  { return "" }
func (s *kkScope) ComponentHost() string                  { return s.services.Mirror }
func (s *kkScope) ComponentOverrides() []infrav1.Override { return s.services.Overrides }
func (s *kkScope) GlobalAuth() *infrav1.Auth              { return &infrav1.Auth{} }
func (s *kkScope) GlobalRegistry() *infrav1.Registry      { return nil }
func (s *kkScope) GetInstancesSpecByRole(infrav1.Role) []infrav1.KKInstanceSpec {
	return nil
}
func (s *kkScope) AllInstances() ([]*infrav1.KKInstance, error) { return nil, errNoAPI }

var (
	rootfsOnce  sync.Mutex
	rootfsByJob = map[string]rootfs.Interface{}
)

// scopes builds the two scopes for one host: the cluster scope shares one rootfs per run (CAPKK's
// ClusterRootFsDir: downloads are per cluster, shared by its instances), the instance scope carries the host
// (KKInstance spec) and the Kubernetes version (Machine spec).
func scopes(job *Job, h *Host) (*kkScope, *scope.InstanceScope) {
	rootfsOnce.Lock()
	fs, ok := rootfsByJob[job.WorkDir]
	if !ok {
		fs = rootfs.NewLocalRootFs("bench", filepath.Join(job.WorkDir, "rootfs"))
		rootfsByJob[job.WorkDir] = fs
	}
	rootfsOnce.Unlock()
	s := job.Services
	version := s.KubernetesVersion
	inst := &scope.InstanceScope{
		Logger:  logr.Discard(),
		Machine: &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: &version}},
		KKInstance: &infrav1.KKInstance{Spec: infrav1.KKInstanceSpec{
			Name:            h.Name,
			Address:         h.Address,
			InternalAddress: h.Address,
			Arch:            s.Arch,
			ContainerManager: infrav1.ContainerManager{
				Type:          file.ContainerdID,
				Version:       s.ContainerdVersion,
				CRICTLVersion: s.CrictlVersion,
				CRISocket:     s.CRISocket,
			},
		}},
	}
	return &kkScope{Logger: logr.Discard(), services: s, fs: fs}, inst
}
