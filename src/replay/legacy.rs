//! The legacy HTTP+SSE transport's client (MCP 2024-11-05): a recorded `GET` stream opened
//! again on the target, its `endpoint` event read, and the replies awaited on it.

use super::*;

/// A legacy HTTP+SSE stream opened again on the target: where to POST, and the replies that
/// arrive on it.
pub(super) struct LegacyStream {
    /// The path and query of the new session's POST endpoint.
    pub(super) endpoint: String,
    replies: tokio::sync::mpsc::UnboundedReceiver<rpc::Envelope>,
    /// Replies that came before they were waited for, by id text.
    early: HashMap<String, rpc::Envelope>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LegacyStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LegacyStream {
    /// Opens the stream (`GET uri`) and waits for its `endpoint` event.
    pub(super) async fn open(
        client: &crate::proxy::upstream::UpstreamClient,
        uri: &str,
        extra: &[(HeaderName, HeaderValue)],
        timeout: Duration,
    ) -> Result<LegacyStream, String> {
        let mut b = Request::get(uri).header(http::header::ACCEPT, "text/event-stream");
        for (k, v) in extra {
            b = b.header(k, v);
        }
        let req = b
            .body(ForwardBody::empty())
            .map_err(|e| format!("cannot build the stream request: {e}"))?;
        let resp = tokio::time::timeout(timeout, client.request(req))
            .await
            .map_err(|_| format!("the stream did not open within {timeout:?}"))?
            .map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("the stream was refused: HTTP {}", resp.status()));
        }
        let (endpoint_tx, endpoint_rx) = tokio::sync::oneshot::channel::<String>();
        let (tx, replies) = tokio::sync::mpsc::unbounded_channel();
        let mut body = resp.into_body();
        let task = tokio::spawn(async move {
            let mut endpoint_tx = Some(endpoint_tx);
            let mut d = SseDecoder::new(64 << 20);
            while let Some(Ok(frame)) = body.frame().await {
                let Some(chunk) = frame.data_ref() else {
                    continue;
                };
                let mut events = Vec::new();
                d.feed(chunk, |e| events.push(e));
                for e in events {
                    match e.kind() {
                        "endpoint" => {
                            if let Some(t) = endpoint_tx.take() {
                                let _ = t.send(String::from_utf8_lossy(&e.data).trim().to_string());
                            }
                        }
                        "message" => {
                            let envs = match rpc::parse_body(&e.data) {
                                Body::Single(e) => vec![e],
                                Body::Batch(v) => v,
                                Body::ParseError(_) => vec![],
                            };
                            for env in envs.into_iter().filter(|e| e.kind.is_response()) {
                                let _ = tx.send(env);
                            }
                        }
                        _ => {}
                    }
                }
            }
        });
        let endpoint = match tokio::time::timeout(timeout, endpoint_rx).await {
            Ok(Ok(e)) => e,
            _ => {
                task.abort();
                return Err("the stream sent no `endpoint` event".into());
            }
        };
        // The endpoint may be a full URL or a path.
        let endpoint = match endpoint.parse::<Uri>() {
            Ok(u) if u.scheme().is_some() => u
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or(endpoint),
            _ => endpoint,
        };
        Ok(LegacyStream {
            endpoint,
            replies,
            early: HashMap::new(),
            task,
        })
    }

    /// Waits until a reply for each of `ids` came on the stream, or `deadline`.
    pub(super) async fn wait_for(
        &mut self,
        ids: &[String],
        deadline: tokio::time::Instant,
    ) -> HashMap<String, rpc::Envelope> {
        let mut out = HashMap::new();
        loop {
            for id in ids {
                if let Some(e) = self.early.remove(id) {
                    out.insert(id.clone(), e);
                }
            }
            if ids.iter().all(|id| out.contains_key(id)) {
                return out;
            }
            match tokio::time::timeout_at(deadline, self.replies.recv()).await {
                Ok(Some(env)) => {
                    if let Some(id) = &env.id {
                        self.early.entry(id.to_json_text()).or_insert(env);
                    }
                }
                _ => return out,
            }
        }
    }
}

/// The session parameter of a legacy POST path: `sessionId` (TypeScript SDK) or `session_id`
/// (Python SDK).
pub(super) fn legacy_session(path: &str) -> Option<&str> {
    crate::inspect::session_param(path.split_once('?')?.1)
}
