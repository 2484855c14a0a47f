//! Helpers shared by the capkk-mgmt integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::future::Future;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, PostParams};
use kube::{Client, ResourceExt};

/// A client for the shared management plane (started on first use).
pub async fn client() -> anyhow::Result<Client> {
    let plane = capkk_mgmt::ManagementPlane::shared()
        .await
        .context("management plane")?;
    Ok(plane.client().await?)
}

/// A name unique across test runs against the same (long-lived) plane.
pub use capkk_mgmt::unique;

/// Creates a fresh namespace named after `prefix` and returns its name. Namespaces are left behind for
/// inspection after a failure; `make mgmt-down` wipes everything.
pub async fn namespace(client: &Client, prefix: &str) -> anyhow::Result<String> {
    let name = unique(prefix);
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(name)
}

/// Creates (POST) an object given as JSON in `ns` and returns it as stored.
pub async fn create(client: &Client, ns: &str, obj: serde_json::Value) -> anyhow::Result<DynamicObject> {
    let (api, _) = dynamic(client, &obj, ns).await?;
    let dynobj: DynamicObject = serde_json::from_value(obj)?;
    let name = dynobj.name_any();
    api.create(&PostParams::default(), &dynobj)
        .await
        .with_context(|| {
            format!(
                "create {} {ns}/{name}",
                dynobj.types.as_ref().map_or("", |t| &t.kind)
            )
        })
}

/// Like [`create`], but returns the API error message instead of failing when the API rejects the object.
pub async fn create_rejected(client: &Client, ns: &str, obj: serde_json::Value) -> anyhow::Result<String> {
    let (api, _) = dynamic(client, &obj, ns).await?;
    let dynobj: DynamicObject = serde_json::from_value(obj)?;
    match api.create(&PostParams::default(), &dynobj).await {
        Ok(created) => bail!(
            "object {} was accepted, expected a rejection: {:?}",
            created.name_any(),
            created.data
        ),
        Err(kube::Error::Api(status)) => Ok(status.message),
        Err(e) => Err(e.into()),
    }
}

pub async fn dynamic(
    client: &Client,
    obj: &serde_json::Value,
    ns: &str,
) -> anyhow::Result<(Api<DynamicObject>, kube::core::ApiResource)> {
    let api_version = obj["apiVersion"].as_str().context("apiVersion")?;
    let kind = obj["kind"].as_str().context("kind")?;
    Ok(capkk_mgmt::dynamic_api(client, api_version, kind, ns).await?)
}

/// Polls `f` every 250 ms until it returns `Some`, failing after `timeout` with `what` in the message.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    Ok(capkk_mgmt::eventually(what, timeout, Duration::from_millis(250), f).await?)
}

/// Installs the capkk-rs CRDs from config/crd/bases (or `$CAPKK_CRD_DIR`, e.g. freshly generated ones).
pub async fn install_capkk_crds(client: &Client) -> anyhow::Result<Vec<String>> {
    let dir = std::env::var_os("CAPKK_CRD_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| capkk_mgmt::repo_root().join("config/crd/bases"));
    Ok(capkk_mgmt::install_crds(client, &dir).await?)
}
