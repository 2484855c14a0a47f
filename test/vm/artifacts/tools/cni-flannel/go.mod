// Pins the flannel CNI plugin (the meta plugin that reads flanneld's /run/flannel/subnet.env and delegates to
// bridge + host-local) for the flannel image. The plugin left containernetworking/plugins after v0.9.1 for its own
// module (flannel-io/cni-plugin), which the Go module proxy does not serve; v0.9.1 is the last release that has it,
// hence a module of its own next to tools/cni (v1.3.0, whose bridge and host-local it delegates to on the node).
module github.com/capkk-rs/capkk-rs/test/vm/artifacts/tools/cni-flannel

go 1.26.0

tool github.com/containernetworking/plugins/plugins/meta/flannel

require (
	github.com/Microsoft/go-winio v0.4.11 // indirect
	github.com/Microsoft/hcsshim v0.8.6 // indirect
	github.com/buger/jsonparser v0.0.0-20180808090653-f4dd9f5a6b44 // indirect
	github.com/containernetworking/cni v0.8.1 // indirect
	github.com/containernetworking/plugins v0.9.1 // indirect
	github.com/sirupsen/logrus v1.0.6 // indirect
	golang.org/x/crypto v0.0.0-20200622213623-75b288015ac9 // indirect
	golang.org/x/sys v0.0.0-20201117170446-d9b008d0a637 // indirect
)
