//! The dashboard's intercept on an HTTP request (`crate::flow::intercept`): a JSON-RPC body whose
//! messages match the filter is held whole (a batch as one) before it goes upstream, and goes on
//! as decided — unchanged, edited, not at all, or answered by rpctap. The reply side is held in
//! the reply's stage (`proxy::faults`).

pub use crate::flow::intercept::call_methods;

use super::body::{ReplySource, TeeBody};
use super::ProxyBody;
use crate::events::Direction;
use crate::flow::intercept::{Intercept, Verdict};
use crate::inspect::{ExchangeCtx, ResponseMeta};
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::Response;

/// What became of a held request.
pub enum Intercepted {
    /// Not held, or forwarded as it was.
    Unchanged,
    /// Forwarded as edited.
    Edited(Bytes),
    /// Answered by rpctap with this reply ([`answer`]).
    Answer(Bytes),
    /// Never sent ([`dropped`]).
    Drop,
}

/// Holds `body` when one of its messages matches the intercept's filter, until decided (or
/// the timeout); the verdict is recorded as injected.
pub async fn request(ic: &Intercept, ctx: &mut ExchangeCtx, body: &Bytes) -> Intercepted {
    let scope = ctx.scope_text();
    let Some((pending, id, method)) =
        crate::flow::intercept::hold_body(ic, Direction::ClientToServer, body, &scope, |_| None)
    else {
        return Intercepted::Unchanged;
    };
    let d = pending.wait().await;
    ctx.intercepted(&d, Direction::ClientToServer, id.as_ref(), Some(&method));
    match d.verdict {
        Verdict::Forward => Intercepted::Unchanged,
        Verdict::Edit(b) => Intercepted::Edited(b),
        Verdict::Answer(b) => Intercepted::Answer(b),
        Verdict::Drop => Intercepted::Drop,
    }
}

/// A dropped request's response: open with nothing in it (the client's timeout decides), like
/// a dropped reply; the exchange ends when the client leaves.
pub fn dropped(ctx: Box<ExchangeCtx>) -> Response<ProxyBody> {
    let mut resp = Response::new(TeeBody::new(ReplySource::Never, Some(ctx)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// rpctap's answer in the server's place, inspected as the reply (the call ends with it).
pub fn answer(mut ctx: Box<ExchangeCtx>, b: Bytes) -> Response<ProxyBody> {
    let ct = "application/json";
    ctx.response_head(&ResponseMeta {
        status: 200,
        content_type: Some(ct),
        session: None,
        content_length: Some(b.len() as u64),
        www_authenticate: None,
        headers: None,
    });
    let mut resp = Response::new(TeeBody::new(ReplySource::Made(Some(b)), Some(ctx)));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    resp
}
