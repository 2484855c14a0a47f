package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func pidPath(stateDir, name string) string { return filepath.Join(stateDir, "run", name+".pid") }
func logPath(stateDir, name string) string { return filepath.Join(stateDir, "logs", name+".log") }

// startProcess starts bin detached (own session, stdin /dev/null, output appended to the log file) and
// records its pid. The process outlives mgmtctl.
func startProcess(stateDir, name, bin string, args []string) error {
	for _, d := range []string{filepath.Join(stateDir, "run"), filepath.Join(stateDir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	logFile, err := os.OpenFile(logPath(stateDir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "\n==== mgmtctl: starting %s at %s: %s %s\n", name, time.Now().UTC().Format(time.RFC3339),
		bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Dir = stateDir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	if err := os.WriteFile(pidPath(stateDir, name), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return err
	}
	logf("started %s (pid %d, log %s)", name, pid, logPath(stateDir, name))
	return nil
}

// pidOf returns the recorded pid of a component and whether that process is alive and still ours: its
// command line must mention the state dir (guards against pid reuse); zombies have an empty command line.
func pidOf(stateDir, name string) (int, bool) {
	b, err := os.ReadFile(pidPath(stateDir, name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return pid, false
	}
	return pid, bytes.Contains(cmdline, []byte(stateDir))
}

func running(stateDir, name string) bool {
	_, ok := pidOf(stateDir, name)
	return ok
}

// stopProcess stops the component recorded in its pidfile (SIGTERM, then SIGKILL after 15 s) and removes
// the pidfile. Processes not started by mgmtctl for this state dir are never touched.
func stopProcess(stateDir, name string) error {
	pid, ok := pidOf(stateDir, name)
	if ok {
		logf("stopping %s (pid %d)", name, pid)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(15 * time.Second)
		for running(stateDir, name) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if running(stateDir, name) {
			logf("%s (pid %d) ignored SIGTERM; sending SIGKILL", name, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			for i := 0; i < 50 && running(stateDir, name); i++ {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if running(stateDir, name) {
			return fmt.Errorf("%s (pid %d) did not stop", name, pid)
		}
	}
	if err := os.Remove(pidPath(stateDir, name)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
