package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func runReset(args []string) error {
	if !hasFlag(args, "-f", "--force") {
		return errors.New("reset needs -f/--force (the simulator does not prompt)")
	}
	var errs []error
	// Stop the control plane started by init (the real kubeadm stops kubelet, which stops the static pods).
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if err := stopDaemon(name); err != nil {
			errs = append(errs, err)
		}
	}
	// The directories and files kubeadm reset removes.
	dirs := []string{filepath.Join(kubeDir, "manifests"), kubeletDir, pkiDir}
	fmt.Printf("[reset] Deleting contents of directories: %v\n", dirs)
	for _, d := range dirs {
		if err := removeContents(d); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(etcdDir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", etcdDir, err))
	}
	files := []string{"admin.conf", "super-admin.conf", "kubelet.conf", "bootstrap-kubelet.conf",
		"controller-manager.conf", "scheduler.conf"}
	fmt.Printf("[reset] Deleting files: %v\n", files)
	for _, f := range files {
		if err := os.Remove(filepath.Join(kubeDir, f)); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeContents(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("remove %s: %w", filepath.Join(dir, e.Name()), err)
		}
	}
	return nil
}

// stopDaemon terminates the process recorded in name's pid file, if it is still that program.
func stopDaemon(name string) error {
	pidFile := filepath.Join(simDir, name+".pid")
	b, err := os.ReadFile(pidFile)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", pidFile, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("%s: bad pid %q", pidFile, strings.TrimSpace(string(b)))
	}
	if !isProgram(pid, name) {
		return nil // already gone (or the pid was reused by something else: leave it alone)
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 100 && isProgram(pid, name); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if isProgram(pid, name) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 50 && isProgram(pid, name); i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if isProgram(pid, name) {
		return fmt.Errorf("[reset] %s (pid %d) did not stop", name, pid)
	}
	fmt.Printf("[reset] Stopped %s (pid %d)\n", name, pid)
	return nil
}

// isProgram reports whether pid is alive (not a zombie) and runs a program called name.
func isProgram(pid int, name string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) state ...": comm is truncated to 15 characters by the kernel.
	s := string(stat)
	open, close_ := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || close_ < open || close_+2 >= len(s) {
		return false
	}
	comm, state := s[open+1:close_], s[close_+2]
	want := name
	if len(want) > 15 {
		want = want[:15]
	}
	return comm == want && state != 'Z' && state != 'X'
}
