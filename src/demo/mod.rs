//! The embedded demo upstream (`rpctap demo-server`): `POST /jsonrpc` (seed 000's JSON-RPC test
//! endpoint) and `/mcp` (a small MCP server over Streamable HTTP), so anyone can see rpctap
//! work without a server of their own.

pub mod jsonrpc;
pub mod mcp;

use crate::server::{self, BoxError};
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
pub use jsonrpc::DemoOptions;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// The largest request body the demo reads.
pub const MAX_BODY: usize = 10 << 20;

pub type DemoBody = UnsyncBoxBody<Bytes, BoxError>;

/// A body fed by a channel: each message is one frame, sent as soon as it is produced.
pub struct ChannelBody {
    pub rx: mpsc::Receiver<Bytes>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

fn full(b: impl Into<Bytes>) -> DemoBody {
    UnsyncBoxBody::new(Full::new(b.into()).map_err(|e| match e {}))
}

pub(crate) fn plain(status: StatusCode, text: &'static str) -> Response<DemoBody> {
    let mut r = Response::new(full(text));
    *r.status_mut() = status;
    if !text.is_empty() {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    r
}

pub(crate) fn json_response(v: &serde_json::Value) -> Response<DemoBody> {
    let mut r = Response::new(full(v.to_string()));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The demo server's shared state.
#[derive(Clone)]
pub struct Demo {
    opts: Arc<DemoOptions>,
    mcp: Arc<mcp::McpState>,
}

const INDEX: &str = "rpctap demo server\n\nPOST /jsonrpc  JSON-RPC 2.0: echo, add, subtract, sleep, error (batches up to 100)\nPOST /mcp      MCP over Streamable HTTP: tools echo, add, slow, fail; a resource; a prompt\nGET  /mcp      the session's server stream\n";

impl Demo {
    pub fn new(opts: DemoOptions) -> Self {
        Demo {
            mcp: Arc::new(mcp::McpState::new(opts.alter_add)),
            opts: Arc::new(opts),
        }
    }

    pub async fn handle(&self, req: Request<crate::server::RequestBody>) -> Response<DemoBody> {
        let (parts, body) = req.into_parts();
        let path = parts.uri.path().to_string();
        let body = match read_body(body).await {
            Ok(b) => b,
            Err(resp) => return resp,
        };
        match (path.as_str(), &parts.method) {
            ("/jsonrpc", &Method::POST) => match jsonrpc::handle_body(&body, &self.opts).await {
                Some(text) => {
                    let mut r = Response::new(full(text));
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                    r
                }
                None => plain(StatusCode::NO_CONTENT, ""),
            },
            ("/jsonrpc", _) => plain(StatusCode::METHOD_NOT_ALLOWED, "POST only\n"),
            ("/mcp", m) => self.mcp.handle(m, &parts.headers, body).await,
            ("/", &Method::GET) => plain(StatusCode::OK, INDEX),
            _ => plain(StatusCode::NOT_FOUND, "not found\n"),
        }
    }
}

async fn read_body(body: crate::server::RequestBody) -> Result<Bytes, Response<DemoBody>> {
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                let mut r = json_response(&serde_json::json!({
                    "jsonrpc": "2.0", "id": null,
                    "error": { "code": -32600, "message": "Invalid Request: body larger than 10 MiB" }
                }));
                *r.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
                Err(r)
            } else {
                Err(plain(
                    StatusCode::BAD_REQUEST,
                    "could not read the request body\n",
                ))
            }
        }
    }
}

/// Runs the demo server on `listener` until `shutdown`.
pub async fn run(
    listener: TcpListener,
    opts: DemoOptions,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) {
    let demo = Demo::new(opts);
    server::serve(
        listener,
        move |_peer| {
            let d = demo.clone();
            move |req| {
                let d = d.clone();
                async move { d.handle(req).await }
            }
        },
        shutdown,
        grace,
    )
    .await;
}
