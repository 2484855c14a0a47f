// Command pause is the pod sandbox's init process: it holds the pod's namespaces, reaps the zombies that are
// re-parented to it (it runs as PID 1 of the sandbox) and exits cleanly on SIGINT/SIGTERM. Static (no cgo).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is what `pause -v` prints (the image tag it is published under is set by the build).
var version = "capkk-rs"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: warning: not PID 1")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "pause: shutting down, got signal %v\n", s)
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
