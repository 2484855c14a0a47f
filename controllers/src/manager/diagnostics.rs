//! The diagnostics endpoint's protection, as CAPI's managers do it: HTTPS with a serving certificate made
//! at start (self-signed: a scraper skips verification or pins it, as for CAPI's), and every request
//! authenticated by a TokenReview of its bearer token and authorized by a SubjectAccessReview of the
//! request's non-resource URL and verb. The manager's ServiceAccount needs `create` on both reviews
//! (config/rbac/metrics_auth_role.yaml); a scraper needs `get` on `/metrics`
//! (config/rbac/metrics_reader_role.yaml).
//!
//! The bearer token is never logged: a failed review says only what failed.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context as _;
use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec},
    authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
};
use kube::{Api, Client, api::PostParams};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tracing::{debug, warn};

/// The names of the serving certificate for `addr` on host `host`: `localhost`, 127.0.0.1, the host's name
/// (the Pod's) when it is a DNS name, and the bind address when it names one.
fn certificate_names(addr: SocketAddr, host: &str) -> Vec<String> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let host = host.trim().to_ascii_lowercase();
    if capkk_api::is_dns_subdomain(&host) && !names.contains(&host) {
        names.push(host);
    }
    let ip = addr.ip().to_string();
    if !addr.ip().is_unspecified() && !names.contains(&ip) {
        names.push(ip);
    }
    names
}

/// A serving configuration with a fresh self-signed certificate for `addr` ([`certificate_names`]).
pub(super) fn self_signed_config(addr: SocketAddr) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let names = certificate_names(addr, &host);
    let certified = rcgen::generate_simple_self_signed(names).context("making the serving certificate")?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()));
    let mut cfg = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .context("the serving certificate")?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// What a review decided.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Allowed,
    /// No token, or the API server did not accept it.
    Unauthenticated,
    /// Authenticated as this user, not allowed.
    Forbidden(String),
}

/// The bearer token of `Authorization: Bearer <token>` (the scheme case-insensitive, as RFC 7235 says).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

async fn review(client: &Client, token: &str, path: &str, verb: &str) -> anyhow::Result<Verdict> {
    let tr = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    let tr = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &tr)
        .await
        .context("TokenReview")?;
    let Some(status) = tr.status.filter(|s| s.authenticated == Some(true)) else {
        return Ok(Verdict::Unauthenticated);
    };
    let user = status.user.unwrap_or_default();
    let name = user.username.clone().unwrap_or_default();
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username,
            groups: user.groups,
            uid: user.uid,
            extra: user.extra,
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_owned()),
                verb: Some(verb.to_owned()),
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let sar = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &sar)
        .await
        .context("SubjectAccessReview")?;
    Ok(if sar.status.is_some_and(|s| s.allowed) {
        Verdict::Allowed
    } else {
        Verdict::Forbidden(name)
    })
}

/// Middleware: pass the request on only when its bearer token is authenticated and allowed `<verb>` on its
/// path; 401 (with `WWW-Authenticate: Bearer`), 403, or 500 when a review could not be made.
pub(super) async fn authorize(State(client): State<Client>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let verb = req.method().as_str().to_ascii_lowercase();
    let verdict = match bearer(req.headers()) {
        None => Ok(Verdict::Unauthenticated),
        Some(token) => review(&client, token, &path, &verb).await,
    };
    match verdict {
        Ok(Verdict::Allowed) => next.run(req).await,
        Ok(Verdict::Unauthenticated) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))],
            "Unauthorized\n",
        )
            .into_response(),
        Ok(Verdict::Forbidden(user)) => {
            debug!(%user, %path, %verb, "diagnostics: request not authorized");
            (
                StatusCode::FORBIDDEN,
                format!("Forbidden: {user:?} may not {verb} {path}\n"),
            )
                .into_response()
        }
        Err(e) => {
            // kube's errors carry the API server's status message, never the request body (the token).
            warn!(error = %format!("{e:#}"), %path, "diagnostics: reviewing a request failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the request could not be reviewed\n",
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_non_empty_bearer_token_is_taken() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            h
        };
        assert_eq!(bearer(&with("Bearer abc.def")), Some("abc.def"));
        assert_eq!(bearer(&with("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&with("Basic dXNlcjpwdw==")), None);
        assert_eq!(bearer(&with("Bearer ")), None);
        assert_eq!(bearer(&with("Bearer")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn the_self_signed_certificate_names_loopback_the_pod_and_a_specific_bind_address() {
        assert_eq!(
            certificate_names("0.0.0.0:8443".parse().unwrap(), "capkk-controller-manager-7d9f\n"),
            ["localhost", "127.0.0.1", "capkk-controller-manager-7d9f"]
        );
        assert_eq!(
            certificate_names("10.1.2.3:8443".parse().unwrap(), "not a name"),
            ["localhost", "127.0.0.1", "10.1.2.3"]
        );
        assert_eq!(
            certificate_names("127.0.0.1:8443".parse().unwrap(), "localhost"),
            ["localhost", "127.0.0.1"]
        );
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let cfg = self_signed_config("10.1.2.3:8443".parse().unwrap()).unwrap();
        assert_eq!(cfg.alpn_protocols, [b"http/1.1".to_vec()]);
    }
}
