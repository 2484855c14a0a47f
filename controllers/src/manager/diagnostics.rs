//! The diagnostics endpoint's protection, as CAPI's managers do it: HTTPS with a serving certificate made
//! at start (self-signed: a scraper skips verification or pins it, as for CAPI's), and every request
//! authenticated by a TokenReview of its bearer token and authorized by a SubjectAccessReview of the
//! request's non-resource URL and verb. The manager's ServiceAccount needs `create` on both reviews
//! (config/rbac/metrics_auth_role.yaml); a scraper needs `get` on `/metrics`
//! (config/rbac/metrics_reader_role.yaml).
//!
//! The bearer token is never logged: a failed review says only what failed.

use std::{net::SocketAddr, sync::Arc, time::Duration};

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
use tokio::time::Instant;
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
pub(super) fn self_signed_config(
    addr: SocketAddr,
    tls: &crate::tls_listener::TlsOptions,
) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let names = certificate_names(addr, &host);
    let certified = rcgen::generate_simple_self_signed(names).context("making the serving certificate")?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()));
    let mut cfg = tls
        .server_config()?
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .context("the serving certificate")?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// How long an allowing verdict is reused for the same token, path and verb. A scraper asks every few seconds
/// to a minute; without reuse each scrape costs the API server two reviews. One minute, as controller-runtime's
/// authenticating filter keeps a TokenReview: a revoked token or a removed permission is honoured within it.
const REVIEW_TTL: Duration = Duration::from_secs(60);
/// How long a refusal is reused: short, so that a permission just granted counts within it (RBAC reaches the
/// authorizer a moment after the binding is made, and a scraper retries), long enough that a client repeating a
/// bad token costs the API server a review every few seconds at most, not one per request.
const REFUSAL_TTL: Duration = Duration::from_secs(5);
/// Verdicts kept at most: past it the expired ones go, and if none has expired, all (a flood of made-up tokens
/// must not grow the memory; the review rate below keeps it from filling within a TTL).
const REVIEW_CACHE_ENTRIES: usize = 1024;
/// Reviews made at once; a request that would need one more is answered 429 without an API request.
const REVIEWS_IN_FLIGHT: usize = 4;
/// Reviews started per second on average, and in a burst: each is one or two requests under the manager's own
/// API priority, so made-up tokens must not make them as fast as they arrive. Scrapers with a cached verdict
/// are not counted.
const REVIEWS_PER_SECOND: f64 = 5.0;
const REVIEW_BURST: f64 = 10.0;

/// Verdicts by key, with when they expire.
type Verdicts = std::collections::HashMap<[u8; 32], (Verdict, Instant)>;

/// The diagnostics endpoint's reviews: the client that makes them, the verdicts recently made, keyed by a
/// SHA-256 of token, path and verb (the token itself is not kept), and the limit on new reviews.
#[derive(Clone)]
pub(super) struct Reviewer {
    client: Client,
    verdicts: Arc<std::sync::Mutex<Verdicts>>,
    limiter: Arc<ReviewLimiter>,
}

impl Reviewer {
    pub(super) fn new(client: Client) -> Reviewer {
        Reviewer {
            client,
            verdicts: Default::default(),
            limiter: Arc::new(ReviewLimiter::new(
                REVIEWS_IN_FLIGHT,
                REVIEWS_PER_SECOND,
                REVIEW_BURST,
            )),
        }
    }

    /// The verdict for `token` on `verb path`: a recent one, or a new review (kept for its TTL), or
    /// [`Verdict::Busy`] when no review may start now.
    async fn verdict(&self, token: &str, path: &str, verb: &str) -> anyhow::Result<Verdict> {
        use sha2::{Digest, Sha256};
        let key: [u8; 32] = Sha256::new()
            .chain_update(token)
            .chain_update([0])
            .chain_update(path)
            .chain_update([0])
            .chain_update(verb)
            .finalize()
            .into();
        let now = Instant::now();
        if let Some(v) = self.verdicts.lock().ok().and_then(|m| {
            m.get(&key)
                .filter(|(_, until)| now < *until)
                .map(|(v, _)| v.clone())
        }) {
            return Ok(v);
        }
        let Some(_in_flight) = self.limiter.try_start() else {
            return Ok(Verdict::Busy);
        };
        let v = review(&self.client, token, path, verb).await?;
        let ttl = if v == Verdict::Allowed {
            REVIEW_TTL
        } else {
            REFUSAL_TTL
        };
        let now = Instant::now();
        if let Ok(mut m) = self.verdicts.lock() {
            if m.len() >= REVIEW_CACHE_ENTRIES {
                m.retain(|_, (_, until)| now < *until);
                if m.len() >= REVIEW_CACHE_ENTRIES {
                    m.clear();
                }
            }
            m.insert(key, (v.clone(), now + ttl));
        }
        Ok(v)
    }
}

/// How many reviews may run at once and how fast new ones may start (a token bucket).
struct ReviewLimiter {
    in_flight: Arc<tokio::sync::Semaphore>,
    per_second: f64,
    burst: f64,
    /// Tokens in the bucket, and when it was last filled.
    bucket: std::sync::Mutex<(f64, Instant)>,
}

impl ReviewLimiter {
    fn new(in_flight: usize, per_second: f64, burst: f64) -> ReviewLimiter {
        ReviewLimiter {
            in_flight: Arc::new(tokio::sync::Semaphore::new(in_flight)),
            per_second,
            burst,
            bucket: std::sync::Mutex::new((burst, Instant::now())),
        }
    }

    /// A slot for one review, held until it ends; `None` when as many run already or the rate is spent.
    fn try_start(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let permit = self.in_flight.clone().try_acquire_owned().ok()?;
        let mut bucket = self.bucket.lock().ok()?;
        let now = Instant::now();
        let (tokens, filled) = *bucket;
        let tokens = (tokens + now.duration_since(filled).as_secs_f64() * self.per_second).min(self.burst);
        if tokens < 1.0 {
            *bucket = (tokens, now);
            return None;
        }
        *bucket = (tokens - 1.0, now);
        Some(permit)
    }
}

/// What a review decided.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    Allowed,
    /// No token, or the API server did not accept it.
    Unauthenticated,
    /// Authenticated as this user, not allowed.
    Forbidden(String),
    /// Not decided: as many reviews as allowed are running or were started just now.
    Busy,
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
/// path; 401 (with `WWW-Authenticate: Bearer`) without a review when there is no bearer token, 403, 429 (with
/// `Retry-After`) when no review may start now, or 500 when a review could not be made.
pub(super) async fn authorize(State(reviewer): State<Reviewer>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let verb = req.method().as_str().to_ascii_lowercase();
    let verdict = match bearer(req.headers()) {
        None => Ok(Verdict::Unauthenticated),
        Some(token) => reviewer.verdict(token, &path, &verb).await,
    };
    match verdict {
        Ok(Verdict::Allowed) => next.run(req).await,
        Ok(Verdict::Unauthenticated) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))],
            "Unauthorized\n",
        )
            .into_response(),
        Ok(Verdict::Busy) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, HeaderValue::from_static("1"))],
            "too many requests to review; retry later\n",
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

    /// An API server that authenticates every token but those starting with `bad` and allows every request but
    /// to `/forbidden`, counting the TokenReviews and SubjectAccessReviews it answers.
    async fn allowing_api_server() -> (Client, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let reviews = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = reviews.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut req = Vec::new();
                    let mut buf = [0u8; 4096];
                    // The head, then as many body bytes as content-length says.
                    let text = loop {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                        let Some(end) = req.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        let head = String::from_utf8_lossy(&req[..end]).to_ascii_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if req.len() >= end + 4 + len {
                            break String::from_utf8_lossy(&req).into_owned();
                        }
                    };
                    let answer = if text.contains(r#""token":"bad"#) {
                        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{},"status":{"authenticated":false}}"#
                    } else if text.contains("/tokenreviews") {
                        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{},"status":{"authenticated":true,"user":{"username":"scraper"}}}"#
                    } else if text.contains(r#""path":"/forbidden""#) {
                        r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{},"status":{"allowed":false}}"#
                    } else {
                        r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{},"status":{"allowed":true}}"#
                    };
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let resp = format!(
                        "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{answer}",
                        answer.len()
                    );
                    let _ = conn.write_all(resp.as_bytes()).await;
                });
            }
        });
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        (client, reviews)
    }

    #[tokio::test]
    async fn an_allowed_request_repeated_within_the_ttl_is_decided_without_another_review() {
        use std::sync::atomic::Ordering::SeqCst;
        let (client, reviews) = allowing_api_server().await;
        let reviewer = Reviewer::new(client);
        assert_eq!(
            reviewer.verdict("tok-a", "/metrics", "get").await.unwrap(),
            Verdict::Allowed
        );
        assert_eq!(reviews.load(SeqCst), 2, "a TokenReview and a SubjectAccessReview");
        assert_eq!(
            reviewer.verdict("tok-a", "/metrics", "get").await.unwrap(),
            Verdict::Allowed
        );
        assert_eq!(
            reviews.load(SeqCst),
            2,
            "the same request within the TTL: no review"
        );
        // Another token, or another request of the same token, is reviewed.
        reviewer.verdict("tok-b", "/metrics", "get").await.unwrap();
        reviewer.verdict("tok-a", "/metrics", "post").await.unwrap();
        assert_eq!(reviews.load(SeqCst), 6);
        // Past the TTL the verdict is made again (a revoked token or permission counts within a minute).
        for (_, until) in reviewer.verdicts.lock().unwrap().values_mut() {
            *until -= REVIEW_TTL;
        }
        reviewer.verdict("tok-a", "/metrics", "get").await.unwrap();
        assert_eq!(reviews.load(SeqCst), 8);
    }

    #[tokio::test]
    async fn a_refusal_repeated_within_the_refusal_ttl_is_decided_without_another_review_and_kept_no_longer()
    {
        use std::sync::atomic::Ordering::SeqCst;
        let (client, reviews) = allowing_api_server().await;
        let reviewer = Reviewer::new(client);
        for _ in 0..3 {
            assert_eq!(
                reviewer.verdict("bad-token", "/metrics", "get").await.unwrap(),
                Verdict::Unauthenticated
            );
            assert_eq!(
                reviewer.verdict("tok-a", "/forbidden", "get").await.unwrap(),
                Verdict::Forbidden("scraper".into())
            );
        }
        assert_eq!(
            reviews.load(SeqCst),
            3,
            "one TokenReview for the bad token, a TokenReview and a SubjectAccessReview for the forbidden path"
        );
        // A permission granted a moment later counts once the refusal's short TTL has passed.
        for (_, until) in reviewer.verdicts.lock().unwrap().values_mut() {
            *until -= REFUSAL_TTL;
        }
        reviewer.verdict("tok-a", "/forbidden", "get").await.unwrap();
        assert_eq!(reviews.load(SeqCst), 5);
    }

    #[tokio::test]
    async fn a_flood_of_distinct_bad_tokens_starts_reviews_only_at_the_review_rate() {
        use std::sync::atomic::Ordering::SeqCst;
        let (client, reviews) = allowing_api_server().await;
        let reviewer = Reviewer::new(client);
        let start = Instant::now();
        let mut refused = 0;
        for i in 0..100 {
            if reviewer
                .verdict(&format!("bad-{i}"), "/metrics", "get")
                .await
                .unwrap()
                == Verdict::Unauthenticated
            {
                refused += 1;
            }
        }
        let elapsed = start.elapsed().as_secs_f64();
        let made = reviews.load(SeqCst);
        assert_eq!(made, refused, "each review made refused its token");
        // The bucket's burst, what it refilled meanwhile, and one for rounding.
        let bound = REVIEW_BURST + REVIEWS_PER_SECOND * elapsed + 1.0;
        assert!(
            (made as f64) <= bound,
            "{made} TokenReviews for 100 made-up tokens in {elapsed:.1} s: at most {bound:.0}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_review_limiter_bounds_reviews_at_once_and_per_second() {
        let limiter = ReviewLimiter::new(2, 5.0, 3.0);
        let a = limiter.try_start().expect("a first review");
        let b = limiter.try_start().expect("a second review");
        assert!(limiter.try_start().is_none(), "a third at once is refused");
        drop(a);
        let c = limiter.try_start().expect("a third once one has ended");
        drop((b, c));
        assert!(limiter.try_start().is_none(), "the burst of 3 is spent");
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(limiter.try_start().is_some(), "one more 1/5 s later");
        assert!(limiter.try_start().is_none());
        tokio::time::advance(Duration::from_secs(60)).await;
        for i in 0..3 {
            assert!(limiter.try_start().is_some(), "review {i} of a refilled burst");
        }
        assert!(
            limiter.try_start().is_none(),
            "the bucket holds no more than the burst"
        );
    }

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
        let cfg = self_signed_config("10.1.2.3:8443".parse().unwrap(), &Default::default()).unwrap();
        assert_eq!(cfg.alpn_protocols, [b"http/1.1".to_vec()]);
    }
}
