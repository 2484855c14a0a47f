//go:build embedcp

package main

import "embed"

// With -tags embedcp the simulator carries gzipped etcd and kube-apiserver (copied into embedded/ by
// build.sh), so the single kubeadm artifact the binary service ships is all a host needs.
//
//go:embed embedded/etcd.gz embedded/kube-apiserver.gz
var embeddedFS embed.FS

func init() { embedded = &embeddedFS }
