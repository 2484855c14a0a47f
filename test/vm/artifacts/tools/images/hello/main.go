// Command hello is the e2e's workload: an HTTP server that answers every request with the pod's host name, so
// a test can tell which pod (and node) answered over the pod network. Static (no cgo).
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"time"
)

func main() {
	addr := ":8080"
	if p := os.Getenv("PORT"); p != "" {
		addr = ":" + p
	}
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", host)
		log.Printf("%s %s %s", r.RemoteAddr, r.Method, r.URL.Path)
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("hello: listening on %s as %s", addr, host)
	log.Fatal(srv.ListenAndServe())
}
