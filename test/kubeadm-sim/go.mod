// kubeadm-sim: a stand-in for kubeadm on sandbox hosts (see README.md). Standard library plus sigs.k8s.io/yaml.
module github.com/capkk-rs/capkk-rs/test/kubeadm-sim

go 1.26.0

require sigs.k8s.io/yaml v1.6.0

require go.yaml.in/yaml/v2 v2.4.2 // indirect
