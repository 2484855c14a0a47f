// Command mirror serves a directory over HTTP on one address (the sandbox bridge), logging each request: the
// e2e's stand-in for a release mirror (KKCluster spec.component.host).
//
//	mirror -listen 198.18.N.1:0 -dir DIR -addr-file FILE
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	dir := flag.String("dir", ".", "directory to serve")
	addrFile := flag.String("addr-file", "", "write the bound address here once listening")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("listen %s: %v", *listen, err)
	}
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	fs := http.FileServer(http.Dir(*dir))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		fs.ServeHTTP(w, r)
		log.Printf("%s %s %s (%s)", r.RemoteAddr, r.Method, r.URL.Path, time.Since(t0).Round(time.Millisecond))
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("serving %s on http://%s", *dir, ln.Addr())
	log.Fatal(srv.Serve(ln))
}
