//! Mock registries on 127.0.0.1 that record what reaches them.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Response, Uri};
use tokio::net::TcpListener;

/// What a mock received: each request's path (with query) and Authorization.
pub type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// Answers a request: method, URI, Authorization, and the mock's own `host:port`.
pub type Handler = dyn Fn(&Method, &Uri, Option<&str>, &str) -> Response<Body> + Send + Sync;

/// Serves `handler` on 127.0.0.1 and returns its `host:port` and what it saw.
pub async fn serve(handler: Arc<Handler>) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let me = addr.clone();
    let app = Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap| {
        let (h, record, me) = (handler.clone(), record.clone(), me.clone());
        async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            record.lock().unwrap().push((uri.to_string(), auth.clone()));
            h(&method, &uri, auth.as_deref(), &me)
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// A response with `status`, `headers` and `body`.
pub fn reply(status: u16, headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> Response<Body> {
    let mut r = Response::builder().status(status);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(Body::from(body.into())).unwrap()
}
