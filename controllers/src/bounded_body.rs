//! Bounded responses from a workload cluster's API server.
//!
//! The workload cluster's API server is the tenant's: its address and credentials come from the tenant's
//! `<cluster>-kubeconfig` Secret, so whatever answers there may answer anything. A kube client collects a
//! plain response (GET, LIST, the Node watch's initial list) whole before decoding it, and a watch's events
//! line by line: a server returning a NodeList of gigabytes, or an endless line, would take the manager's
//! memory with it. [`limit_layer`] wraps the client's HTTP service so that a plain response fails once its
//! body passes the limit, and a watch once one line (one event) does; the caller sees an error and retries.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use kube::client::{Body as KubeBody, DynBody};
use tower::{Layer, Service};

/// Largest plain response (or watch event) accepted from a workload cluster: a page of the Node watch's
/// initial list is 500 Nodes of a few to a few tens of KiB each.
pub(crate) const WORKLOAD_MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error a response body ends with once it passes its limit (a body error: the client wraps it in its
/// own).
#[derive(Debug)]
pub(crate) struct TooLarge {
    limit: u64,
    /// Empty, or says the limit is per watch event.
    what: &'static str,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the workload API server's response is larger than {} bytes{}",
            self.limit, self.what
        )
    }
}

impl std::error::Error for TooLarge {}

/// A response body that fails once more than `limit` bytes arrive (in total, or, for a watch, since the
/// last newline).
struct Bounded {
    inner: Box<DynBody>,
    counter: Counter,
    failed: bool,
}

/// Bytes seen against a limit: in total, or since the last newline.
struct Counter {
    limit: u64,
    per_line: bool,
    count: u64,
}

impl Counter {
    /// Counts `data` and says whether the response (or, per line, the current line) is now over the limit.
    fn exceeds(&mut self, data: &[u8]) -> bool {
        if !self.per_line {
            self.count = self.count.saturating_add(data.len() as u64);
            return self.count > self.limit;
        }
        // The first piece continues the current line; each following piece starts a new one.
        let mut pieces = data.split(|b| *b == b'\n');
        let first = pieces.next().map_or(0, <[u8]>::len);
        self.count = self.count.saturating_add(first as u64);
        for piece in pieces {
            if self.count > self.limit {
                return true;
            }
            self.count = piece.len() as u64;
        }
        self.count > self.limit
    }
}

impl Body for Bounded {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref()
            && self.counter.exceeds(data)
        {
            self.failed = true;
            let err = TooLarge {
                limit: self.counter.limit,
                what: if self.counter.per_line {
                    " in one watch event"
                } else {
                    ""
                },
            };
            return Poll::Ready(Some(Err(Box::new(err))));
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `req` asks for a watch (its events arrive as lines for as long as it lasts).
fn is_watch<B>(req: &Request<B>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// The service [`limit_layer`] wraps a client's HTTP service in.
#[derive(Clone)]
pub(crate) struct Limit<S> {
    inner: S,
    limit: u64,
}

impl<S> Service<Request<KubeBody>> for Limit<S>
where
    S: Service<Request<KubeBody>, Response = Response<Box<DynBody>>>,
    S::Future: Send + 'static,
{
    type Response = Response<Box<DynBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<KubeBody>) -> Self::Future {
        let (limit, per_line) = (self.limit, is_watch(&req));
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await?;
            Ok(res.map(|inner| {
                Box::new(Bounded {
                    inner,
                    counter: Counter {
                        limit,
                        per_line,
                        count: 0,
                    },
                    failed: false,
                }) as Box<DynBody>
            }))
        })
    }
}

/// A layer bounding every response body of a kube client's HTTP service to `limit` bytes (each watch event,
/// for a watch). Use with `kube::client::ClientBuilder::with_layer`.
#[derive(Clone, Copy)]
pub(crate) struct LimitLayer {
    limit: u64,
}

/// [`LimitLayer`] of `limit` bytes.
pub(crate) fn limit_layer(limit: u64) -> LimitLayer {
    LimitLayer { limit }
}

impl<S> Layer<S> for LimitLayer {
    type Service = Limit<S>;

    fn layer(&self, inner: S) -> Limit<S> {
        Limit {
            inner,
            limit: self.limit,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    };

    use k8s_openapi::api::core::v1::Node;
    use kube::{Api, client::ClientBuilder};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A fake API server answering every request with a NodeList of `nodes` Nodes (about 1 KiB each),
    /// streamed in chunks; it counts the bytes it managed to write.
    pub(crate) async fn huge_nodelist_server(nodes: u64) -> (String, Arc<AtomicU64>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let written = Arc::new(AtomicU64::new(0));
        let w = written.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let w = w.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                    if conn.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let node = format!(
                        "{{\"metadata\":{{\"name\":\"n\",\"labels\":{{\"pad\":\"{}\"}}}}}}",
                        "x".repeat(1000)
                    );
                    let mut chunk = String::from(
                        "{\"kind\":\"NodeList\",\"apiVersion\":\"v1\",\"metadata\":{},\"items\":[",
                    );
                    for i in 0..nodes {
                        if i > 0 {
                            chunk.push(',');
                        }
                        chunk.push_str(&node);
                        if chunk.len() > 64 * 1024 || i + 1 == nodes {
                            let frame = format!("{:x}\r\n{chunk}\r\n", chunk.len());
                            if conn.write_all(frame.as_bytes()).await.is_err() {
                                return;
                            }
                            w.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                            chunk.clear();
                        }
                    }
                    let _ = conn.write_all(b"2\r\n]}\r\n0\r\n\r\n").await;
                });
            }
        });
        (url, written)
    }

    #[tokio::test]
    async fn a_workload_api_server_returning_a_huge_nodelist_fails_the_list_at_the_cap_instead_of_filling_memory()
     {
        // 2 GiB of Nodes offered; 4 MiB accepted.
        let (url, written) = huge_nodelist_server(2 * 1024 * 1024).await;
        let limit = 4 * 1024 * 1024;
        let config = kube::Config::new(url.parse().unwrap());
        let client = ClientBuilder::try_from(config)
            .unwrap()
            .with_layer(&limit_layer(limit))
            .build();
        let started = std::time::Instant::now();
        let err = Api::<Node>::all(client)
            .list(&Default::default())
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("larger than 4194304 bytes"), "{text}");
        // The server could only write what the client read before giving up (plus socket buffers).
        let sent = written.load(Ordering::Relaxed);
        assert!(
            sent < 64 * 1024 * 1024,
            "the client stopped reading early: {sent} bytes sent"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(20));

        // The same list under the cap is read in full.
        let (small, _) = huge_nodelist_server(100).await;
        let client = ClientBuilder::try_from(kube::Config::new(small.parse().unwrap()))
            .unwrap()
            .with_layer(&limit_layer(limit))
            .build();
        let nodes = Api::<Node>::all(client).list(&Default::default()).await.unwrap();
        assert_eq!(nodes.items.len(), 100);
    }

    #[test]
    fn a_watch_is_bounded_per_event_and_a_plain_request_in_total() {
        let req = |uri: &str| Request::builder().uri(uri).body(()).unwrap();
        assert!(is_watch(&req("/api/v1/nodes?watch=true&timeoutSeconds=290")));
        assert!(!is_watch(&req("/api/v1/nodes?limit=500")));
        assert!(!is_watch(&req("/api/v1/nodes?fieldSelector=watch%3Dtrue")));
        let body = |per_line| Counter {
            limit: 10,
            per_line,
            count: 0,
        };
        // Many short events pass a watch; one long event, even split over frames, does not.
        let mut watch = body(true);
        for _ in 0..100 {
            assert!(!watch.exceeds(b"{\"a\":1}\n"));
        }
        assert!(!watch.exceeds(b"0123456"));
        assert!(watch.exceeds(b"7890\n"));
        let mut plain = body(false);
        assert!(!plain.exceeds(b"12345\n"));
        assert!(plain.exceeds(b"12345\n"));
    }
}
