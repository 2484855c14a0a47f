package main

import (
	"crypto/x509"
	"encoding/base64"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// runtimeExtension writes what a capkk-rs manager running outside the cluster needs to serve CAPI's
// Runtime Extension hooks, and what registers it with CAPI (docs/upgrades.md):
//
//	<out>/ca.crt, ca.key            a fresh CA (the ExtensionConfig's caBundle)
//	<out>/tls.crt, tls.key          the serving certificate for the host of --url, signed by that CA
//	                                (the manager's --runtime-extension-cert-dir is <out>)
//	<out>/extensionconfig.yaml      an ExtensionConfig pointing CAPI at --url with the CA as caBundle
//
// cert-manager does this for the in-cluster install (config/components/runtime-extension); a manager run as a
// process next to the management plane (tests, VM runs) has no cert-manager.
func runtimeExtension(args []string) {
	fs := flag.NewFlagSet("runtime-extension", flag.ExitOnError)
	out := fs.String("out", "", "directory to write ca.crt, tls.crt, tls.key and extensionconfig.yaml into")
	rawURL := fs.String("url", "", "https URL CAPI calls, e.g. https://127.0.0.1:9443 (its host goes into the certificate)")
	name := fs.String("name", "capkk-inplace", "name of the ExtensionConfig")
	namespace := fs.String("namespace", "",
		"only Clusters in this namespace use the extension (spec.namespaceSelector); default: every namespace")
	_ = fs.Parse(args)
	if *out == "" || *rawURL == "" {
		fatalf("usage: mgmtctl runtime-extension --out DIR --url https://HOST:PORT [--name NAME] [--namespace NS]")
	}
	yamlText, err := writeRuntimeExtension(*out, *rawURL, *name, *namespace)
	if err != nil {
		fatalf("runtime-extension: %v", err)
	}
	logf("wrote %s/{ca.crt,tls.crt,tls.key,extensionconfig.yaml} for %s", *out, *rawURL)
	fmt.Print(yamlText)
}

func writeRuntimeExtension(out, rawURL, name, namespace string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return "", fmt.Errorf("--url %q: want https://HOST[:PORT] (CAPI calls extensions over HTTPS only)", rawURL)
	}
	var dns []string
	var ips []net.IP
	if ip := net.ParseIP(u.Hostname()); ip != nil {
		ips = append(ips, ip)
	} else {
		dns = append(dns, u.Hostname())
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return "", err
	}
	ca, err := newCA()
	if err != nil {
		return "", err
	}
	srv, err := issue(ca, "capkk-runtime-extension", nil, dns, ips, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return "", err
	}
	if err := writePair(out, "ca", ca); err != nil {
		return "", err
	}
	if err := writePair(out, "tls", srv); err != nil {
		return "", err
	}
	spec := map[string]any{
		"clientConfig": map[string]any{
			"url":      rawURL,
			"caBundle": base64.StdEncoding.EncodeToString(certPEM(ca.cert)),
		},
	}
	if namespace != "" {
		spec["namespaceSelector"] = map[string]any{
			"matchLabels": map[string]any{"kubernetes.io/metadata.name": namespace},
		}
	}
	obj := map[string]any{
		"apiVersion": "runtime.cluster.x-k8s.io/v1beta2",
		"kind":       "ExtensionConfig",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}
	b, err := yaml.Marshal(obj)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(out, "extensionconfig.yaml"), b, 0o644); err != nil {
		return "", err
	}
	return string(b), nil
}
