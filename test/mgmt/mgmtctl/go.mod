// mgmtctl starts and stops the local management plane (etcd, kube-apiserver, CAPI managers) used by the
// capkk-rs tests. See ../README.md.
module github.com/capkk-rs/capkk-rs/test/mgmt/mgmtctl

go 1.26.0

require sigs.k8s.io/yaml v1.6.0

require go.yaml.in/yaml/v2 v2.4.2 // indirect
