//! A Runtime Extension served by a process on this machine (the capkk-rs manager with
//! `--runtime-extension-bind-address`), registered with the plane's CAPI through an `ExtensionConfig`
//! (docs/upgrades.md). cert-manager issues the certificate of the in-cluster install; here
//! `mgmt.sh runtime-extension` (mgmtctl) writes a CA, a serving certificate for the address and the
//! `ExtensionConfig` whose `caBundle` is that CA, the same command a shell script calls.
//!
//! ```no_run
//! # async fn demo(client: kube::Client, dir: &std::path::Path) -> Result<(), capkk_mgmt::Error> {
//! let ext = capkk_mgmt::RuntimeExtension::prepare(dir, "127.0.0.1".parse().unwrap(), "inplace-x", Some("ns")).await?;
//! // start the manager with ext.manager_args(), then:
//! ext.register(&client).await?;
//! let discovered = ext.discovered(&client, std::time::Duration::from_secs(60)).await?;
//! # Ok(()) }
//! ```

use std::{
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    time::Duration,
};

use serde_json::Value;

use crate::Error;

/// apiVersion of CAPI's `ExtensionConfig`.
pub const EXTENSION_CONFIG_API_VERSION: &str = "runtime.cluster.x-k8s.io/v1beta2";

/// A Runtime Extension's certificates and `ExtensionConfig`, for a process serving at [`Self::addr`].
#[derive(Debug, Clone)]
pub struct RuntimeExtension {
    /// The serving process's `--runtime-extension-cert-dir`: `tls.crt`, `tls.key` (and the CA, `ca.crt`).
    pub cert_dir: PathBuf,
    /// Where the process listens and CAPI calls (`https://<addr>`).
    pub addr: SocketAddr,
    /// The `ExtensionConfig` (also in `<cert_dir>/extensionconfig.yaml`).
    pub extension_config: Value,
}

impl RuntimeExtension {
    /// Writes a CA, a serving certificate for `ip` and an `ExtensionConfig` named `name` for
    /// `https://<ip>:<a free port>` into `dir`; with `namespace`, only that namespace's Clusters use it (the
    /// plane is shared: CAPI allows one in-place extension per Cluster, so each test selects its own).
    pub async fn prepare(
        dir: &Path,
        ip: IpAddr,
        name: &str,
        namespace: Option<&str>,
    ) -> Result<RuntimeExtension, Error> {
        let port = std::net::TcpListener::bind((ip, 0))
            .and_then(|l| l.local_addr())
            .map_err(|source| Error::RunScript {
                script: PathBuf::from(format!("bind {ip}:0 (a free port for the runtime extension)")),
                source,
            })?
            .port();
        let addr = SocketAddr::new(ip, port);
        let url = format!("https://{addr}");
        let out = dir.to_string_lossy().into_owned();
        let mut args = vec!["--out", &out, "--url", &url, "--name", name];
        if let Some(ns) = namespace {
            args.extend(["--namespace", ns]);
        }
        let yaml = crate::run_script_args("runtime-extension", &args, Duration::from_secs(120), &[]).await?;
        let origin = format!("{}/extensionconfig.yaml", dir.display());
        let extension_config =
            crate::parse_yaml_docs(&yaml, &origin)?
                .into_iter()
                .next()
                .ok_or(Error::InvalidManifest {
                    origin,
                    field: "kind",
                })?;
        Ok(RuntimeExtension {
            cert_dir: dir.to_owned(),
            addr,
            extension_config,
        })
    }

    /// The `ExtensionConfig`'s name.
    pub fn name(&self) -> &str {
        self.extension_config["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
    }

    /// The manager flags serving the hooks with this certificate at [`Self::addr`].
    pub fn manager_args(&self) -> Vec<String> {
        vec![
            format!("--runtime-extension-bind-address={}", self.addr),
            format!("--runtime-extension-cert-dir={}", self.cert_dir.display()),
        ]
    }

    /// The CA's PEM (`caBundle`).
    pub fn ca_pem(&self) -> Result<Vec<u8>, Error> {
        let path = self.cert_dir.join("ca.crt");
        std::fs::read(&path).map_err(|source| Error::ReadManifest { path, source })
    }

    /// Creates (or updates) the `ExtensionConfig`: CAPI then calls the extension's discovery.
    pub async fn register(&self, client: &kube::Client) -> Result<(), Error> {
        crate::apply(client, "", &self.extension_config).await?;
        Ok(())
    }

    /// Waits until CAPI reports the `ExtensionConfig` `Discovered` True with handlers; returns it. CAPI's
    /// message when discovery failed is in the timeout error.
    pub async fn discovered(&self, client: &kube::Client, timeout: Duration) -> Result<Value, Error> {
        let (api, _) =
            crate::dynamic_api(client, EXTENSION_CONFIG_API_VERSION, "ExtensionConfig", "").await?;
        crate::eventually(
            &format!("CAPI discovered ExtensionConfig {}", self.name()),
            timeout,
            Duration::from_millis(500),
            || async {
                let o = api
                    .get(self.name())
                    .await
                    .map_err(|e| format!("get ExtensionConfig {}: {e}", self.name()))?;
                let o = serde_json::to_value(o).unwrap_or_default();
                let cond = o["status"]["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == "Discovered"))
                    .cloned()
                    .unwrap_or_default();
                let handlers = o["status"]["handlers"].as_array().map_or(0, Vec::len);
                if cond["status"] == "True" && handlers > 0 {
                    Ok(Some(o))
                } else {
                    Err(format!("Discovered: {cond}"))
                }
            },
        )
        .await
    }

    /// Deletes the `ExtensionConfig` (absent is fine).
    pub async fn unregister(&self, client: &kube::Client) -> Result<(), Error> {
        let (api, _) =
            crate::dynamic_api(client, EXTENSION_CONFIG_API_VERSION, "ExtensionConfig", "").await?;
        match api.delete(self.name(), &Default::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(source) => Err(Error::Api {
                action: format!("delete ExtensionConfig {}", self.name()),
                source,
            }),
        }
    }
}
