// Command registry is the CNCF distribution registry (github.com/distribution/distribution/v3, pinned in
// go.mod) with the storage driver and auth the node tests use: filesystem storage and htpasswd Basic auth.
// Upstream's cmd/registry also links the Azure, GCS and S3 drivers, whose SDKs would double this build;
// the registry code serving the HTTP API is the same package either way.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
