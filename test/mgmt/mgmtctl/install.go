package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// installCAPI renders CAPI's kustomize trees the way config/default would, minus cert-manager and the
// in-cluster Service: every CRD listed in <provider>/config/crd/kustomization.yaml is applied with the
// provider label; the CRDs patched by a crd/patches/webhook_in_*.yaml get their conversion webhook pointed
// at https://127.0.0.1:<webhook port>/convert with our CA bundle; the kustomization's labels (the CAPI
// contract labels) are added; the webhook configurations of
// <provider>/config/webhook/manifests.yaml get the kustomize name prefix and URL client configs.
func installCAPI(ctx context.Context, kc *kubeClient, stateDir, capiSrc string, caPEM []byte) error {
	caBundle := base64.StdEncoding.EncodeToString(caPEM)
	var crds, hooks []object
	for _, m := range managers {
		c, err := renderCRDs(capiSrc, m, caBundle)
		if err != nil {
			return err
		}
		crds = append(crds, c...)
		h, err := renderWebhooks(capiSrc, m, caBundle)
		if err != nil {
			return err
		}
		hooks = append(hooks, h...)
	}
	// Skip the apply when exactly these objects were applied to this plane before.
	digest := sha256.New()
	for _, o := range append(append([]object{}, crds...), hooks...) {
		b, err := json.Marshal(o.body)
		if err != nil {
			return err
		}
		fmt.Fprintf(digest, "%s\n%s\n", o.path, b)
	}
	sum := hex.EncodeToString(digest.Sum(nil))
	marker := filepath.Join(stateDir, "capi-installed")
	if prev, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(prev)) == sum {
		return nil
	}
	var crdNames []string
	for _, o := range crds {
		if err := kc.apply(ctx, o.path, o.body); err != nil {
			return err
		}
		crdNames = append(crdNames, o.name)
	}
	if err := waitEstablished(ctx, kc, crdNames); err != nil {
		return err
	}
	for _, o := range hooks {
		if err := kc.apply(ctx, o.path, o.body); err != nil {
			return err
		}
	}
	logf("applied %d CAPI CRDs and %d webhook configurations", len(crds), len(hooks))
	return os.WriteFile(marker, []byte(sum+"\n"), 0o644)
}

// object is a rendered manifest and the URL path it is applied at.
type object struct {
	name string
	path string
	body map[string]any
}

type kustomization struct {
	Labels []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels"`
	CommonLabels map[string]string `json:"commonLabels"`
	Resources    []string          `json:"resources"`
	Patches      []struct {
		Path string `json:"path"`
	} `json:"patches"`
}

func readYAML(path string, into any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	return nil
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

func readDocs(path string) ([]map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, doc := range docSep.Split(string(b), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		if obj != nil {
			out = append(out, obj)
		}
	}
	return out, nil
}

func renderCRDs(capiSrc string, m manager, caBundle string) ([]object, error) {
	dir := filepath.Join(capiSrc, m.configDir, "crd")
	var k kustomization
	if err := readYAML(filepath.Join(dir, "kustomization.yaml"), &k); err != nil {
		return nil, err
	}
	// Conversion patches: CRD name -> conversionReviewVersions.
	conversion := map[string]any{}
	for _, p := range k.Patches {
		var patch map[string]any
		if err := readYAML(filepath.Join(dir, p.Path), &patch); err != nil {
			return nil, err
		}
		name, _ := dig(patch, "metadata", "name").(string)
		versions := dig(patch, "spec", "conversion", "webhook", "conversionReviewVersions")
		if name == "" || versions == nil {
			return nil, fmt.Errorf("%s: unexpected patch shape (want a CRD conversion webhook patch)", p.Path)
		}
		conversion[name] = versions
	}
	var out []object
	for _, res := range k.Resources {
		crd := map[string]any{}
		if err := readYAML(filepath.Join(dir, res), &crd); err != nil {
			return nil, err
		}
		name, _ := dig(crd, "metadata", "name").(string)
		if name == "" {
			return nil, fmt.Errorf("%s: CRD without metadata.name", res)
		}
		delete(crd, "status")
		meta := crd["metadata"].(map[string]any)
		delete(meta, "creationTimestamp")
		addLabel(meta, "cluster.x-k8s.io/provider", m.provider)
		// kustomize labels / commonLabels, e.g. the contract labels cluster.x-k8s.io/v1beta2: v1beta2.
		for key, value := range k.CommonLabels {
			addLabel(meta, key, value)
		}
		for _, l := range k.Labels {
			for key, value := range l.Pairs {
				addLabel(meta, key, value)
			}
		}
		if versions, ok := conversion[name]; ok {
			spec := crd["spec"].(map[string]any)
			spec["conversion"] = map[string]any{
				"strategy": "Webhook",
				"webhook": map[string]any{
					"conversionReviewVersions": versions,
					"clientConfig": map[string]any{
						"url":      fmt.Sprintf("https://127.0.0.1:%d/convert", m.webhookPort),
						"caBundle": caBundle,
					},
				},
			}
			delete(conversion, name)
		}
		out = append(out, object{name, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + name, crd})
	}
	if len(conversion) > 0 {
		return nil, fmt.Errorf("%s: conversion patches for CRDs that are not resources: %v", dir, conversion)
	}
	return out, nil
}

func renderWebhooks(capiSrc string, m manager, caBundle string) ([]object, error) {
	path := filepath.Join(capiSrc, m.configDir, "webhook", "manifests.yaml")
	docs, err := readDocs(path)
	if err != nil {
		return nil, err
	}
	var out []object
	for _, obj := range docs {
		kind, _ := obj["kind"].(string)
		var resource string
		switch kind {
		case "MutatingWebhookConfiguration":
			resource = "mutatingwebhookconfigurations"
		case "ValidatingWebhookConfiguration":
			resource = "validatingwebhookconfigurations"
		default:
			return nil, fmt.Errorf("%s: unexpected kind %q", path, kind)
		}
		meta := obj["metadata"].(map[string]any)
		name := m.namePrefix + meta["name"].(string)
		meta["name"] = name
		addLabel(meta, "cluster.x-k8s.io/provider", m.provider)
		hooks, _ := obj["webhooks"].([]any)
		for _, h := range hooks {
			hook := h.(map[string]any)
			svcPath, _ := dig(hook, "clientConfig", "service", "path").(string)
			if svcPath == "" {
				return nil, fmt.Errorf("%s: webhook %v has no clientConfig.service.path", path, hook["name"])
			}
			hook["clientConfig"] = map[string]any{
				"url":      fmt.Sprintf("https://127.0.0.1:%d%s", m.webhookPort, svcPath),
				"caBundle": caBundle,
			}
		}
		out = append(out, object{name, "/apis/admissionregistration.k8s.io/v1/" + resource + "/" + name, obj})
	}
	return out, nil
}

func waitEstablished(ctx context.Context, kc *kubeClient, names []string) error {
	for _, name := range names {
		for {
			crd, err := kc.get(ctx, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name)
			if err == nil && conditionTrue(crd, "Established") {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("CRD %s not established: %v", name, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func conditionTrue(obj map[string]any, typ string) bool {
	conds, _ := dig(obj, "status", "conditions").([]any)
	for _, c := range conds {
		cm, _ := c.(map[string]any)
		if cm["type"] == typ && cm["status"] == "True" {
			return true
		}
	}
	return false
}

func dig(obj any, keys ...string) any {
	for _, k := range keys {
		m, ok := obj.(map[string]any)
		if !ok {
			return nil
		}
		obj = m[k]
	}
	return obj
}

func addLabel(meta map[string]any, key, value string) {
	labels, _ := meta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
		meta["labels"] = labels
	}
	labels[key] = value
}
