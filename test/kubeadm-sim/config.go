package main

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// doc is one YAML document of a kubeadm configuration file, kept generic so both kubeadm.k8s.io/v1beta3 and
// v1beta4 (which CABPK picks by Kubernetes version) are understood.
type doc map[string]any

func (d doc) kind() string { s, _ := d["kind"].(string); return s }

// str walks nested maps: d.str("discovery", "bootstrapToken", "token").
func (d doc) str(path ...string) string {
	v := d.get(path...)
	switch t := v.(type) {
	case string:
		return t
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(t)
	}
	return ""
}

func (d doc) get(path ...string) any {
	var cur any = map[string]any(d)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func (d doc) list(path ...string) []any { l, _ := d.get(path...).([]any); return l }

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// readConfig parses a multi-document kubeadm configuration file into documents keyed by kind.
func readConfig(path string) (map[string]doc, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kubeadm config: %w", err)
	}
	out := map[string]doc{}
	for i, part := range docSep.Split(string(raw), -1) {
		if strings.TrimSpace(part) == "" {
			continue
		}
		var d doc
		if err := yaml.Unmarshal([]byte(part), &d); err != nil {
			return nil, fmt.Errorf("parse %s document %d: %w", path, i+1, err)
		}
		if d == nil {
			continue
		}
		if d.kind() == "" {
			return nil, fmt.Errorf("parse %s document %d: missing kind", path, i+1)
		}
		out[d.kind()] = d
	}
	return out, nil
}

// nodeRegistration is what init and join share: the Node's name, labels, taints and kubelet flags.
type nodeRegistration struct {
	Name      string
	Taints    []any // nil = kubeadm's default for the role; empty = no taints
	TaintsSet bool
	ExtraArgs map[string]string
}

func parseNodeRegistration(d doc) (nodeRegistration, error) {
	nr := nodeRegistration{ExtraArgs: map[string]string{}}
	nr.Name = d.str("nodeRegistration", "name")
	if strings.Contains(nr.Name, "{{") {
		return nr, fmt.Errorf("nodeRegistration.name %q is an unrendered template", nr.Name)
	}
	if nr.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return nr, fmt.Errorf("nodeRegistration.name is empty and the hostname is unknown: %w", err)
		}
		nr.Name = h
	}
	nr.Name = strings.ToLower(nr.Name)
	if m, ok := d.get("nodeRegistration").(map[string]any); ok {
		// `taints: null` (what CABPK writes when none are set) means kubeadm's default, `[]` means none.
		if t, present := m["taints"]; present && t != nil {
			nr.TaintsSet = true
			nr.Taints, _ = t.([]any)
			if nr.Taints == nil {
				nr.Taints = []any{}
			}
		}
	}
	// v1beta3: map; v1beta4: list of {name, value}.
	switch a := d.get("nodeRegistration", "kubeletExtraArgs").(type) {
	case map[string]any:
		for k, v := range a {
			nr.ExtraArgs[k] = fmt.Sprint(v)
		}
	case []any:
		for i, e := range a {
			m, ok := e.(map[string]any)
			if !ok {
				return nr, fmt.Errorf("nodeRegistration.kubeletExtraArgs[%d] is not {name, value}", i)
			}
			nr.ExtraArgs[fmt.Sprint(m["name"])] = fmt.Sprint(m["value"])
		}
	}
	return nr, nil
}

// labels is what kubelet and kubeadm put on a Node: well-known labels plus --node-labels.
func (nr nodeRegistration) labels(controlPlane bool) map[string]string {
	l := map[string]string{
		"kubernetes.io/hostname":  nr.Name,
		"kubernetes.io/os":        "linux",
		"kubernetes.io/arch":      goArch(),
		"beta.kubernetes.io/os":   "linux",
		"beta.kubernetes.io/arch": goArch(),
	}
	if controlPlane {
		l["node-role.kubernetes.io/control-plane"] = ""
		l["node.kubernetes.io/exclude-from-external-load-balancers"] = ""
	}
	for _, kv := range strings.Split(nr.ExtraArgs["node-labels"], ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			l[k] = v
		}
	}
	return l
}

// taints returns the Node's registration taints: as configured, or kubeadm's default for a control plane.
func (nr nodeRegistration) taints(controlPlane bool) []any {
	if nr.TaintsSet {
		return nr.Taints
	}
	if controlPlane {
		return []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}}
	}
	return []any{}
}

// splitHostPort parses "host:port" (port defaulting to def).
func splitHostPort(s string, def int) (string, int, error) {
	if s == "" {
		return "", 0, fmt.Errorf("empty endpoint")
	}
	host, portS, err := net.SplitHostPort(s)
	if err != nil {
		return s, def, nil
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return "", 0, fmt.Errorf("endpoint %q: bad port", s)
	}
	return host, port, nil
}

// localAddressTowards returns the source address this host uses to reach host (the node's InternalIP).
func localAddressTowards(host string) (string, error) {
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return "", fmt.Errorf("find the local address towards %s: %w", host, err)
	}
	defer c.Close()
	a, _, _ := net.SplitHostPort(c.LocalAddr().String())
	return a, nil
}
