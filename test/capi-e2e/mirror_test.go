package capie2e

import (
	"testing"

	"github.com/BurntSushi/toml"
	. "github.com/onsi/gomega"
)

// The hosts.toml the upgrades flavor's nodes get (containerd's registry host configuration) must parse as TOML and
// send registry.k8s.io's pulls to the nodes' plain-HTTP registry with its Basic auth header; a malformed file would
// only show on a VM, as kubeadm failing to pull.
func TestTheK8sIOMirrorSendsPullsToTheRegistryWithItsBasicAuth(t *testing.T) {
	g := NewWithT(t)
	var got struct {
		Server string `toml:"server"`
		Host   map[string]struct {
			Capabilities []string            `toml:"capabilities"`
			Header       map[string][]string `toml:"header"`
		} `toml:"host"`
	}
	_, err := toml.Decode(k8sIOMirrorHostsTOML("198.18.0.1:5000", "capkk", "pa:ss"), &got)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Server).To(Equal("https://registry.k8s.io"))
	g.Expect(got.Host).To(HaveLen(1))
	h, ok := got.Host["http://198.18.0.1:5000"]
	g.Expect(ok).To(BeTrue(), "hosts: %v", got.Host)
	g.Expect(h.Capabilities).To(ConsistOf("pull", "resolve"))
	// base64("capkk:pa:ss")
	g.Expect(h.Header).To(Equal(map[string][]string{"Authorization": {"Basic Y2Fwa2s6cGE6c3M="}}))
}
