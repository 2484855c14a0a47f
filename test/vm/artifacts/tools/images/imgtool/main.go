// Command imgtool makes and publishes the node images without a container engine (go-containerregistry).
//
//	imgtool build -o OUT.tar -tag REF [-tag REF]... [-layer-dir DIR]... [-file SRC=DST]...
//	              [-entrypoint /path[,arg]...] [-env K=V]... [-workdir DIR] [-user UID[:GID]]
//	    one OCI image (linux/amd64) whose layers are, in order, each -layer-dir tree and then one layer
//	    holding every -file; written as a docker-style tarball carrying every -tag (for `ctr images import`).
//	imgtool push -registry HOST:PORT TAR...
//	    push every tag of every tarball to HOST:PORT over plain HTTP, keeping the repository path and dropping
//	    the original registry host (registry.k8s.io/kube-apiserver:v1.36.3 -> HOST:PORT/kube-apiserver:v1.36.3).
//	imgtool htpasswd -user NAME
//	    print an htpasswd line (bcrypt, the only hash distribution accepts); the password is read from the
//	    NODE_REGISTRY_PASSWORD environment variable so it never appears in a process list.
//
// Layers are deterministic (sorted entries, owner 0:0, mtime 0), so the same inputs give the same digests and
// the content-hash cache stays meaningful.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/crypto/bcrypt"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	log.SetFlags(0)
	log.SetPrefix("imgtool: ")
	if len(os.Args) < 2 {
		log.Fatal("usage: imgtool build|push|htpasswd ...")
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "push":
		err = push(os.Args[2:])
	case "htpasswd":
		err = htpasswd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (build, push, htpasswd)", os.Args[1])
	}
	if err != nil {
		log.Fatal(err)
	}
}

func build(args []string) error {
	fl := flag.NewFlagSet("build", flag.ExitOnError)
	out := fl.String("o", "", "output tarball")
	var tags, dirs, files, env multi
	fl.Var(&tags, "tag", "image reference (repeatable)")
	fl.Var(&dirs, "layer-dir", "directory tree that becomes one layer (repeatable, in order)")
	fl.Var(&files, "file", "SRC=DST file added to the last layer (repeatable)")
	fl.Var(&env, "env", "K=V environment entry (repeatable)")
	entrypoint := fl.String("entrypoint", "", "comma-separated entrypoint")
	workdir := fl.String("workdir", "", "working directory")
	// Numeric, because a Pod with runAsNonRoot and no runAsUser is only started when the kubelet can see
	// from the image that its user is not root.
	user := fl.String("user", "", "numeric UID[:GID] the image runs as (empty: root)")
	_ = fl.Parse(args)
	if *out == "" || len(tags) == 0 {
		return errors.New("build needs -o and at least one -tag")
	}
	var layers []v1.Layer
	for _, d := range dirs {
		l, err := layerFrom(func(tw *tar.Writer) error { return addTree(tw, d) })
		if err != nil {
			return fmt.Errorf("layer from %s: %w", d, err)
		}
		layers = append(layers, l)
	}
	if len(files) > 0 {
		l, err := layerFrom(func(tw *tar.Writer) error { return addFiles(tw, files) })
		if err != nil {
			return fmt.Errorf("file layer: %w", err)
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"}, env...)
	if *entrypoint != "" {
		cf.Config.Entrypoint = strings.Split(*entrypoint, ",")
	}
	cf.Config.WorkingDir = *workdir
	cf.Config.User = *user
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	refs := map[name.Reference]v1.Image{}
	for _, t := range tags {
		tag, err := name.NewTag(t)
		if err != nil {
			return fmt.Errorf("tag %q: %w", t, err)
		}
		refs[tag] = img
	}
	tmp := *out + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		return err
	}
	return os.Rename(tmp, *out)
}

// layerFrom builds a gzip (level 1: the guests decompress under emulation, and speed beats size on a local
// bridge) layer from a tar stream written by fill, held in memory (the largest layer is ~100 MB).
func layerFrom(fill func(*tar.Writer) error) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := fill(tw); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
}

func header(name string, fi fs.FileInfo, link string) (*tar.Header, error) {
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return nil, err
	}
	h.Name = name
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	h.ModTime, h.AccessTime, h.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
	h.Format = tar.FormatPAX
	if fi.IsDir() {
		h.Name += "/"
	}
	return h, nil
}

// addTree writes every entry under root (relative names, sorted), keeping symlinks as symlinks.
func addTree(tw *tar.Writer, root string) error {
	var paths []string
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel, _ := filepath.Rel(root, p)
		if err := addPath(tw, p, filepath.ToSlash(rel)); err != nil {
			return err
		}
	}
	return nil
}

func addPath(tw *tar.Writer, src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(src); err != nil {
			return err
		}
	}
	h, err := header(dst, fi, link)
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

// addFiles writes SRC=DST files, creating their parent directories (0755) first.
func addFiles(tw *tar.Writer, specs []string) error {
	seen := map[string]bool{}
	sort.Strings(specs)
	for _, s := range specs {
		src, dst, ok := strings.Cut(s, "=")
		if !ok || !path.IsAbs(dst) {
			return fmt.Errorf("-file %q: want SRC=/absolute/destination", s)
		}
		dst = strings.TrimPrefix(path.Clean(dst), "/")
		var parents []string
		for d := path.Dir(dst); d != "." && d != "/"; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if seen[d] {
				continue
			}
			seen[d] = true
			h := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0),
				Format: tar.FormatPAX}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
		}
		if err := addPath(tw, src, dst); err != nil {
			return err
		}
	}
	return nil
}

func push(args []string) error {
	fl := flag.NewFlagSet("push", flag.ExitOnError)
	registry := fl.String("registry", "", "HOST:PORT of the target registry (plain HTTP)")
	_ = fl.Parse(args)
	if *registry == "" || fl.NArg() == 0 {
		return errors.New("push needs -registry and tarballs")
	}
	for _, file := range fl.Args() {
		m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		for _, desc := range m {
			for _, t := range desc.RepoTags {
				src, err := name.NewTag(t)
				if err != nil {
					return err
				}
				img, err := tarball.ImageFromPath(file, &src)
				if err != nil {
					return fmt.Errorf("%s %s: %w", file, t, err)
				}
				dst, err := name.NewTag(*registry+"/"+src.RepositoryStr()+":"+src.TagStr(), name.Insecure)
				if err != nil {
					return err
				}
				t0 := time.Now()
				if err := remote.Write(dst, img); err != nil {
					return fmt.Errorf("push %s: %w", dst, err)
				}
				d, _ := img.Digest()
				log.Printf("pushed %s (%s) in %s", dst, d, time.Since(t0).Round(time.Millisecond))
			}
		}
	}
	return nil
}

func htpasswd(args []string) error {
	fl := flag.NewFlagSet("htpasswd", flag.ExitOnError)
	user := fl.String("user", "", "user name")
	_ = fl.Parse(args)
	pw := os.Getenv("NODE_REGISTRY_PASSWORD")
	if *user == "" || strings.ContainsAny(*user, ":\n") || pw == "" {
		return errors.New("htpasswd needs -user (no ':' or newline) and NODE_REGISTRY_PASSWORD")
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.DefaultCost)
	if err != nil {
		return err
	}
	fmt.Printf("%s:%s\n", *user, h)
	return nil
}
