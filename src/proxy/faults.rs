//! Fault injection on the HTTP reply (`crate::flow::fault`): the [`Stage`] a reply passes through when
//! a fault is armed on one of its request's calls. The inspector has already read each chunk as
//! the server sent it (the stage sits after the tee's copy); the stage changes what the client
//! gets: an SSE reply event by event (held, dropped, doubled, its id changed, its JSON cut, the
//! stream cut after N events, written slowly), a JSON reply whole (bounded by the inspection
//! cap; larger, it passes unchanged). Everything it does is returned as [`Note`]s, which the
//! body publishes as fault events.
//!
//! Under `direction = "s2c"` rules the stage also decides the server's requests on an event
//! stream ([`ServerRequests`]): rpctap answers one in the client's place (a POST of its own to
//! the server), holds it, or closes the stream; the faults on the client's answer are armed in
//! the proxy's [`Answers`] (the answer comes in a POST of its own) and applied by the proxy when
//! that POST arrives.

use crate::flow::fault::{Action, Armed, At, Cut, Fired};
use crate::locks::Locked as _;
use crate::rpc::Id;
use bytes::Bytes;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;

/// What a fault (or an intercept verdict) did, for the exchange's fault event.
#[derive(Debug)]
pub struct Note {
    pub rule: Arc<str>,
    pub action: &'static str,
    pub id: Option<Id>,
    pub method: Arc<str>,
    pub message: Option<Bytes>,
    pub detail: String,
    /// The call is a server's request (a `direction = "s2c"` rule).
    pub server_call: bool,
    /// rpctap answered the call itself: it ends so.
    pub answered: bool,
}

impl Note {
    pub fn of(
        fired: &Fired,
        id: Id,
        method: Arc<str>,
        message: Option<Bytes>,
        detail: String,
    ) -> Note {
        Note {
            rule: fired.rule.clone(),
            action: fired.action.name(),
            id: Some(id),
            method,
            message,
            detail,
            server_call: fired.direction == crate::events::Direction::ServerToClient,
            answered: false,
        }
    }
}

/// The server's requests on an event stream under `direction = "s2c"` rules: the rules in
/// force, the keys of the request that opened the stream, how rpctap answers the server in the
/// client's place, and where the faults on the client's answers are armed.
pub struct ServerRequests {
    pub limiter: Arc<crate::limit::Limiter>,
    pub peer: std::net::IpAddr,
    pub session: Option<String>,
    pub headers: http::HeaderMap,
    /// Sends rpctap's answer (a JSON-RPC error) to the server.
    pub answer: Box<dyn Fn(Bytes) + Send + Sync>,
    pub answers: Arc<Answers>,
}

/// One armed answer: the MCP session, the request's id (as JSON text), the fault, the method.
type ArmedAnswer = (String, String, Fired, Arc<str>);

/// Faults armed on the clients' answers to the servers' requests, by MCP session and id: over
/// HTTP the answer comes in a POST of its own. Bounded ([`Answers::MAX`]); an answer that never
/// comes leaves its entry until the bound pushes the oldest out.
#[derive(Default)]
pub struct Answers {
    by_key: std::sync::Mutex<VecDeque<ArmedAnswer>>,
    /// How many are armed (read without the lock on every POST while s2c rules exist).
    len: std::sync::atomic::AtomicUsize,
}

impl Answers {
    pub const MAX: usize = 4096;

    pub fn arm(&self, session: Option<&str>, id: &Id, f: Fired, method: &str) {
        let mut q = self.by_key.locked();
        if q.len() >= Self::MAX {
            q.pop_front();
        }
        q.push_back((
            session.unwrap_or("").to_string(),
            id.to_json_text(),
            f,
            method.into(),
        ));
        self.len
            .store(q.len(), std::sync::atomic::Ordering::Relaxed);
    }

    pub fn is_empty(&self) -> bool {
        self.len.load(std::sync::atomic::Ordering::Relaxed) == 0
    }

    /// The fault armed on the client's answer in `body` (one response), taken out.
    pub fn take(&self, session: Option<&str>, body: &Bytes) -> Option<(Id, Fired, Arc<str>)> {
        if self.is_empty() {
            return None;
        }
        let id = crate::flow::fault::reply_id(body)?;
        let (s, key) = (session.unwrap_or(""), id.to_json_text());
        let mut q = self.by_key.locked();
        let i = q.iter().position(|(qs, qk, _, _)| qs == s && *qk == key)?;
        let (_, _, f, m) = q.remove(i)?;
        self.len
            .store(q.len(), std::sync::atomic::Ordering::Relaxed);
        Some((id, f, m))
    }
}

/// The dashboard's intercept on a reply: the handle, the request's calls (a reply's method is
/// its call's) and the exchange's scope, for the filter.
pub struct Interception {
    pub intercept: crate::flow::intercept::Intercept,
    pub methods: Vec<(Id, Arc<str>, Option<Arc<str>>)>,
    pub scope: String,
}

/// What the proxy does with a client's answer (a POST of its own) that a `direction = "s2c"`
/// fault was armed on.
#[derive(Debug, PartialEq)]
pub enum OnAnswer {
    /// Not forwarded: rpctap answers the client's POST `202 Accepted` as the server would.
    Drop,
    /// Forwarded, then sent to the server a second time.
    Twice,
    /// Forwarded as these bytes instead.
    Replace(Bytes),
    /// Forwarded after this long.
    Delay(Duration),
    /// Forwarded at this many bytes a second.
    Throttle(u64),
    Unchanged,
}

/// The fault on a client's answer `body`: what the proxy does, what it sent instead, and the
/// detail for the record.
pub fn on_answer(fired: &Fired, body: &Bytes) -> (OnAnswer, Option<Bytes>, String) {
    if let Some(r) = crate::flow::fault::reshape(fired, body) {
        let what = match (r.frames.len(), &fired.action) {
            (0, _) => OnAnswer::Drop,
            (2, _) => OnAnswer::Twice,
            (_, Action::WrongId | Action::Malformed) => match &r.made {
                Some(b) => OnAnswer::Replace(b.clone()),
                None => OnAnswer::Unchanged,
            },
            _ => OnAnswer::Unchanged,
        };
        return (what, r.made, r.detail.to_string());
    }
    match &fired.action {
        Action::Delay(d, _) => (
            OnAnswer::Delay(*d),
            None,
            format!("the client's answer held {}", crate::units::show_secs(*d)),
        ),
        Action::Throttle(bps) => (
            OnAnswer::Throttle(*bps),
            None,
            format!("the client's answer written at {bps} bytes a second"),
        ),
        a => (
            OnAnswer::Unchanged,
            None,
            format!("not applied: `{}` on a client's answer over HTTP", a.name()),
        ),
    }
}

/// A reply message held by the intercept, in the output's order.
struct HeldOut {
    wait: Pin<Box<dyn Future<Output = crate::flow::intercept::Decision> + Send>>,
    /// The SSE event (or the JSON body) as the server sent it.
    frame: Bytes,
    sse: bool,
    id: Option<Id>,
    method: Arc<str>,
}

/// What goes out: bytes after an optional wait, or a held message's verdict to come.
enum Item {
    Data(Bytes, Option<Duration>),
    Held(Box<HeldOut>),
}

/// What the body should do next.
#[derive(Debug)]
pub enum Out {
    /// Send these bytes.
    Data(Bytes),
    /// Wait (a timer is registered with the context, or the reply is held for good).
    Wait,
    /// Read more of the upstream's reply.
    Need,
    /// The reply ends here.
    End,
}

/// The reply as faults change it.
pub struct Stage {
    armed: Armed,
    cut: Option<Cut>,
    sse: bool,
    /// SSE: the partial event; JSON: the body so far.
    buf: Vec<u8>,
    cap: usize,
    /// A JSON body over the cap: passed on unchanged from there.
    gave_up: bool,
    /// What goes out, each after its wait (or its verdict).
    out: VecDeque<Item>,
    intercept: Option<Interception>,
    /// What held messages' verdicts did, for the body to publish.
    notes: Vec<Note>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// SSE events a `delay` holds, each with its time: it alone waits, the stream's other
    /// events pass meanwhile (as calls over HTTP are each their own request); one goes out
    /// between two events once due, and the stream ends after the last.
    later: Vec<(tokio::time::Instant, Bytes)>,
    later_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    src_done: bool,
    /// The stream was cut: nothing more goes out.
    ended: bool,
    /// The reply is held for good (a dropped JSON reply): the client's timeout decides.
    hold: bool,
    /// `direction = "s2c"` rules: the server's requests on this stream decided here.
    requests: Option<ServerRequests>,
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stage")
            .field("sse", &self.sse)
            .finish_non_exhaustive()
    }
}

fn with_data(event: &[u8], data: &[u8]) -> Bytes {
    // The event's other fields (`id:`, `event:`) kept, its data replaced by one line.
    let mut out = Vec::with_capacity(event.len() + data.len());
    for l in crate::inspect::sse::lines(event) {
        if l.is_empty() || l.starts_with(b"data:") {
            continue;
        }
        out.extend_from_slice(l);
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// An SSE event's data (its `data:` lines joined), `None` for an event without data.
fn event_data(event: &[u8]) -> Option<Vec<u8>> {
    let mut data: Option<Vec<u8>> = None;
    for l in crate::inspect::sse::lines(event) {
        if let Some(v) = l.strip_prefix(b"data:") {
            let v = v.strip_prefix(b" ").unwrap_or(v);
            let d = data.get_or_insert_with(Vec::new);
            if !d.is_empty() {
                d.push(b'\n');
            }
            d.extend_from_slice(v);
        }
    }
    data
}

impl Stage {
    /// A stage for a reply (`sse`: an event stream) with the request's faults armed and the
    /// dashboard's intercept; `None` when neither acts on the reply.
    pub fn new(
        faults: Vec<crate::limit::enforce::CallFault>,
        sse: bool,
        cap: usize,
        intercept: Option<Interception>,
        requests: Option<ServerRequests>,
    ) -> Option<Stage> {
        let mut armed = Armed::default();
        let mut cut = None;
        for f in faults {
            match f.fired.action {
                Action::CutStreamAfter { .. } => cut = Cut::of(&f.fired, &f.id, &f.method),
                ref a if a.on_reply() => armed.arm(&f.id, f.fired.clone(), &f.method),
                _ => {}
            }
        }
        let requests = requests.filter(|_| sse);
        if armed.is_empty() && cut.is_none() && intercept.is_none() && requests.is_none() {
            return None;
        }
        Some(Stage {
            requests,
            armed,
            cut,
            intercept,
            notes: Vec::new(),
            sse,
            buf: Vec::new(),
            cap,
            gave_up: false,
            out: VecDeque::new(),
            timer: None,
            later: Vec::new(),
            later_timer: None,
            src_done: false,
            ended: false,
            hold: false,
        })
    }

    /// A chunk of the upstream's reply.
    pub fn feed(&mut self, chunk: &[u8], notes: &mut Vec<Note>) {
        if self.ended {
            return;
        }
        if !self.sse {
            if self.gave_up {
                self.push(Bytes::copy_from_slice(chunk), None);
            } else if self.buf.len() + chunk.len() > self.cap {
                // Too large to change: passed on as it is.
                self.gave_up = true;
                let held = std::mem::take(&mut self.buf);
                self.push(Bytes::from(held), None);
                self.push(Bytes::copy_from_slice(chunk), None);
            } else {
                self.buf.extend_from_slice(chunk);
            }
            return;
        }
        self.buf.extend_from_slice(chunk);
        self.events(false, notes);
        if self.buf.len() > self.cap {
            // An event beyond the cap: passed on as it comes.
            let held = std::mem::take(&mut self.buf);
            self.push(Bytes::from(held), None);
        }
    }

    /// The whole events in the buffer, each through the faults and the intercept (`at_end`:
    /// the stream is over, so a last `\r` ends its line).
    fn events(&mut self, at_end: bool, notes: &mut Vec<Note>) {
        while let Some(end) = crate::inspect::sse::event_end(&self.buf, at_end) {
            let event: Vec<u8> = self.buf.drain(..end).collect();
            self.event(Bytes::from(event), notes);
            if self.ended {
                self.buf.clear();
                return;
            }
        }
    }

    /// The upstream's reply ended.
    pub fn finish(&mut self, notes: &mut Vec<Note>) {
        self.src_done = true;
        if self.ended {
            return;
        }
        if self.sse && !self.gave_up {
            self.events(true, notes);
            if self.ended {
                return;
            }
        }
        let rest = std::mem::take(&mut self.buf);
        if self.sse || self.gave_up {
            if !rest.is_empty() {
                self.push(Bytes::from(rest), None);
            }
            return;
        }
        self.json_body(Bytes::from(rest), notes);
    }

    fn push(&mut self, b: Bytes, wait: Option<Duration>) {
        if !b.is_empty() || wait.is_some() {
            self.out.push_back(Item::Data(b, wait));
        }
    }

    /// Holds `frame` (whose JSON is `data`) when the intercept's filter matches one of its
    /// messages: true when held (it goes out when decided).
    fn held(&mut self, frame: &Bytes, data: &Bytes, sse: bool) -> bool {
        use crate::events::Direction;
        let Some(ic) = self.intercept.as_ref().filter(|i| i.intercept.is_on()) else {
            return false;
        };
        let methods = &ic.methods;
        let Some((pending, id, method)) = crate::flow::intercept::hold_body(
            &ic.intercept,
            Direction::ServerToClient,
            data,
            &ic.scope,
            |id| {
                methods
                    .iter()
                    .find(|(i, _, _)| i == id)
                    .map(|(_, m, t)| (&**m, t.as_deref()))
            },
        ) else {
            return false;
        };
        let held = HeldOut {
            wait: Box::pin(pending.wait()),
            frame: frame.clone(),
            sse,
            id,
            method: method.into(),
        };
        self.out.push_back(Item::Held(Box::new(held)));
        true
    }

    /// A held message decided: what goes out in its place, and the note.
    fn decided(&mut self, h: HeldOut, d: crate::flow::intercept::Decision) {
        use crate::flow::intercept::Verdict;
        let out = match &d.verdict {
            Verdict::Forward => Some(h.frame.clone()),
            Verdict::Edit(b) | Verdict::Answer(b) if h.sse => Some(with_data(&h.frame, b)),
            Verdict::Edit(b) | Verdict::Answer(b) => Some(b.clone()),
            Verdict::Drop => {
                if !h.sse {
                    // A JSON reply dropped: the response is held open (the client's timeout).
                    self.hold = true;
                }
                None
            }
        };
        if let Some(b) = out {
            self.out.push_front(Item::Data(b, None));
        }
        self.notes.push(Note {
            rule: crate::flow::intercept::RULE.into(),
            action: d.action(),
            id: h.id,
            method: h.method,
            message: d.message(),
            detail: d.detail(crate::events::Direction::ServerToClient),
            server_call: false,
            answered: false,
        });
    }

    /// What held messages' verdicts did since the last call.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    /// One whole SSE event of the server's.
    fn event(&mut self, event: Bytes, notes: &mut Vec<Note>) {
        let data = event_data(&event);
        if let Some(cut) = data.as_ref().and_then(|_| Cut::due(&mut self.cut)) {
            self.cut_at(
                cut,
                &event,
                [
                    "the SSE stream cut in the middle of an event",
                    "the SSE stream cut before this event",
                ],
                notes,
            );
            return;
        }
        if let Some(d) = data.as_ref().filter(|_| self.requests.is_some()) {
            if self.server_request(&event, d, notes) {
                return;
            }
        }
        if let Some(d) = data.as_ref().filter(|_| self.intercept.is_some()) {
            if self.held(&event, &Bytes::copy_from_slice(d), true) {
                return;
            }
        }
        let armed = data
            .as_ref()
            .and_then(|d| crate::flow::fault::reply_id(&Bytes::copy_from_slice(d)))
            .and_then(|id| self.armed.take(&id).map(|(f, m)| (id, f, m)));
        let (Some((id, fired, method)), Some(data)) = (armed, data) else {
            self.push(event, None);
            return;
        };
        let (message, detail) = self.apply(&fired, event, &data, true);
        notes.push(Note::of(&fired, id, method, message, detail));
    }

    /// A server's request in an event (`data` its JSON) under the `direction = "s2c"` rules: true
    /// when a fault took the event (answered by rpctap, held, or the stream closed at it); a
    /// fault on the client's answer is armed and the event goes on.
    fn server_request(&mut self, event: &Bytes, data: &[u8], notes: &mut Vec<Note>) -> bool {
        use crate::events::Direction;
        let Some(rq) = self.requests.as_ref() else {
            return false;
        };
        let body = Bytes::copy_from_slice(data);
        let parsed = crate::rpc::parse_body(&body);
        // One request per event (what the SDKs send); a batch of the server's passes.
        if !matches!(&parsed, crate::rpc::Body::Single(e) if e.kind == crate::rpc::Kind::Request) {
            return false;
        }
        let keys = crate::limit::RequestKeys {
            peer: rq.peer,
            session: rq.session.as_deref(),
            headers: &rq.headers,
        };
        let plan = crate::limit::enforce::plan_in(
            Direction::ServerToClient,
            &rq.limiter,
            &parsed,
            &keys,
            None,
        );
        if let Some(m) = plan.members.first() {
            if let (Some(r), Some(id)) = (&m.refused, &m.id) {
                let reply = Bytes::from(crate::limit::enforce::refusal_reply(id, r));
                (rq.answer)(reply.clone());
                let code = match r.fault.as_ref().map(|f| &f.action) {
                    Some(Action::Error { code, .. }) => *code,
                    _ => r.code,
                };
                notes.push(Note {
                    rule: r.rule.clone(),
                    action: "error",
                    id: Some(id.clone()),
                    method: m.method.as_str().into(),
                    message: Some(reply),
                    detail: format!(
                        "answered by rpctap with error {code} in the client's place; the \
                         server's request never reached the client"
                    ),
                    server_call: true,
                    answered: true,
                });
                return true;
            }
        }
        let t = crate::limit::enforce::triage(
            plan.call_faults(),
            [
                "the SSE stream closed when the call arrived",
                "the SSE stream closed when the server's request arrived",
            ],
        );
        // Recorded when the client's answer passes.
        for f in t.answers.into_iter().chain(t.cuts).chain(t.replies) {
            rq.answers
                .arm(rq.session.as_deref(), &f.id, f.fired, &f.method);
        }
        for (f, detail) in t.now {
            let method: Arc<str> = f.method.as_str().into();
            notes.push(Note::of(&f.fired, f.id, method, None, detail));
        }
        if t.close {
            self.ended = true;
            return true;
        }
        if let Some(d) = t.delay {
            self.push(event.clone(), Some(d));
            return true;
        }
        false
    }

    /// Applies one reply fault to `frame` (an SSE event whose data is `data`, or a JSON body,
    /// which is `data`); what it sent in the server's place and what it did.
    fn apply(
        &mut self,
        fired: &Fired,
        frame: Bytes,
        data: &[u8],
        sse: bool,
    ) -> (Option<Bytes>, String) {
        let data = Bytes::copy_from_slice(data);
        if let Some(r) = crate::flow::fault::reshape(fired, &data) {
            if fired.action == Action::Drop {
                // The response is held open: the client's timeout decides (an SSE stream's
                // other events still pass).
                self.hold = true;
            }
            for (i, f) in r.frames.iter().enumerate() {
                if i > 0 && !sse {
                    // Two JSON texts in one body: what a server that answered twice sends.
                    self.push(Bytes::from_static(b"\n"), None);
                }
                // The reply as it was keeps its event's own bytes; a changed one is a new event.
                let out = if *f == data {
                    frame.clone()
                } else if sse {
                    with_data(&frame, f)
                } else {
                    f.clone()
                };
                self.push(out, None);
            }
            return (r.made, r.detail.to_string());
        }
        match &fired.action {
            Action::Delay(d, At::Reply) if sse => {
                self.later.push((tokio::time::Instant::now() + *d, frame));
                (
                    None,
                    format!("the reply held {}", crate::units::show_secs(*d)),
                )
            }
            Action::Delay(d, At::Reply) => {
                self.push(frame, Some(*d));
                (
                    None,
                    format!("the reply held {}", crate::units::show_secs(*d)),
                )
            }
            Action::Throttle(bps) => {
                let piece = (*bps / 20).max(1) as usize;
                let step = Duration::from_secs_f64(piece as f64 / *bps as f64);
                let mut at = 0;
                while at < frame.len() {
                    let end = (at + piece).min(frame.len());
                    self.push(frame.slice(at..end), (at > 0).then_some(step));
                    at = end;
                }
                (None, format!("the reply written at {bps} bytes a second"))
            }
            _ => {
                self.push(frame, None);
                (None, String::new())
            }
        }
    }

    /// The armed cut happens at `frame`: the stream ends before it, or (`mid_event`) after its
    /// first half; `details` says which, in that order (mid, before).
    fn cut_at(&mut self, cut: Cut, frame: &Bytes, details: [&str; 2], notes: &mut Vec<Note>) {
        let detail = if cut.mid_event {
            self.push(frame.slice(..frame.len() / 2), None);
            details[0]
        } else {
            details[1]
        };
        notes.push(Note::of(
            &cut.fired,
            cut.id,
            cut.method,
            None,
            detail.to_string(),
        ));
        self.ended = true;
    }

    /// A whole JSON reply (one response or a batch of them) under the armed faults.
    fn json_body(&mut self, body: Bytes, notes: &mut Vec<Note>) {
        if let Some(cut) = self.cut.take() {
            // A JSON reply is one event: cut, the client gets none (or half, `mid_event`).
            self.cut_at(
                cut,
                &body,
                [
                    "the reply cut in the middle",
                    "the reply cut before it began",
                ],
                notes,
            );
            return;
        }
        if self.intercept.is_some() && self.held(&body, &body, false) {
            return;
        }
        match crate::rpc::parse_body(&body) {
            crate::rpc::Body::Single(e) => {
                let armed =
                    e.id.clone()
                        .filter(|_| e.kind.is_response())
                        .and_then(|id| self.armed.take(&id).map(|(f, m)| (id, f, m)));
                let Some((id, fired, method)) = armed else {
                    self.push(body, None);
                    return;
                };
                let (message, detail) = self.apply(&fired, body.clone(), &body, false);
                notes.push(Note::of(&fired, id, method, message, detail));
            }
            crate::rpc::Body::Batch(members) => {
                // Each member its own fault; the batch written back with what they left.
                let mut kept: Vec<Vec<u8>> = Vec::new();
                let mut wait: Option<Duration> = None;
                for m in members {
                    let armed =
                        m.id.clone()
                            .filter(|_| m.kind.is_response())
                            .and_then(|id| self.armed.take(&id).map(|(f, me)| (id, f, me)));
                    let Some((id, fired, method)) = armed else {
                        kept.push(m.raw.to_vec());
                        continue;
                    };
                    let (message, detail) = match crate::flow::fault::reshape(&fired, &m.raw) {
                        Some(r) => {
                            kept.extend(r.frames.iter().map(|f| f.to_vec()));
                            (r.made, r.detail.to_string())
                        }
                        None => {
                            kept.push(m.raw.to_vec());
                            match &fired.action {
                                Action::Delay(d, _) => {
                                    wait = Some(wait.unwrap_or_default().max(*d));
                                    (
                                        None,
                                        format!(
                                            "the batch reply held {}",
                                            crate::units::show_secs(*d)
                                        ),
                                    )
                                }
                                a => (
                                    None,
                                    format!("not applied: `{}` inside a batch reply", a.name()),
                                ),
                            }
                        }
                    };
                    notes.push(Note::of(&fired, id, method, message, detail));
                }
                let joined = crate::rpc::join_array(kept.iter().map(|v| &v[..]));
                self.push(joined, wait);
            }
            crate::rpc::Body::ParseError(_) => self.push(body, None),
        }
    }

    /// The next thing the body should do.
    pub fn poll_out(&mut self, cx: &mut Context<'_>) -> Out {
        if let Some(b) = self.due_later(cx) {
            return Out::Data(b);
        }
        if let Some(t) = self.timer.as_mut() {
            if t.as_mut().poll(cx).is_pending() {
                return Out::Wait;
            }
            self.timer = None;
            if let Some(Item::Data(b, w)) = self.out.front_mut() {
                *w = None;
                if b.is_empty() {
                    self.out.pop_front();
                }
            }
        }
        if let Some(Item::Held(h)) = self.out.front_mut() {
            let std::task::Poll::Ready(d) = h.wait.as_mut().poll(cx) else {
                return Out::Wait;
            };
            if let Some(Item::Held(h)) = self.out.pop_front() {
                self.decided(*h, d);
            }
        }
        if let Some(Item::Data(_, Some(wait))) = self.out.front() {
            let mut t = Box::pin(tokio::time::sleep(*wait));
            if t.as_mut().poll(cx).is_pending() {
                self.timer = Some(t);
                return Out::Wait;
            }
        }
        match self.out.pop_front() {
            Some(Item::Data(b, _)) => return Out::Data(b),
            // Two held in a row: the next one's verdict is polled on the next call.
            Some(held @ Item::Held(_)) => {
                self.out.push_front(held);
                cx.waker().wake_by_ref();
                return Out::Wait;
            }
            None => {}
        }
        if self.hold && (self.src_done || self.ended) {
            // Never woken: the body lives until the client gives up and drops it.
            return Out::Wait;
        }
        if self.src_done && !self.ended && !self.later.is_empty() {
            // The delayed events still to go: their timer is registered (`due_later`).
            return Out::Wait;
        }
        if self.ended || self.src_done {
            return Out::End;
        }
        Out::Need
    }

    /// A delayed SSE event whose time has come, when the stream is between two events; else
    /// the earliest one's timer registered with `cx`. Inside a throttled event nothing is
    /// registered: its own timer wakes the body, and the event goes out after it.
    fn due_later(&mut self, cx: &mut Context<'_>) -> Option<Bytes> {
        if self.later.is_empty()
            || self.ended
            || self.timer.is_some()
            || matches!(self.out.front(), Some(Item::Data(_, Some(_))))
        {
            return None;
        }
        let now = tokio::time::Instant::now();
        if let Some(i) = self.later.iter().position(|(at, _)| *at <= now) {
            self.later_timer = None;
            return Some(self.later.remove(i).1);
        }
        let first = self.later.iter().map(|(at, _)| *at).min()?;
        let t = self
            .later_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(first)));
        if t.deadline() != first {
            t.as_mut().reset(first);
        }
        if t.as_mut().poll(cx).is_ready() {
            // Due since the check above: taken on the next poll.
            cx.waker().wake_by_ref();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::enforce::CallFault;

    fn fault(id: i64, action: Action) -> CallFault {
        CallFault {
            id: Id::Num(id.to_string().into()),
            method: "tools/call".into(),
            fired: Fired {
                rule: "r".into(),
                action,
                direction: crate::events::Direction::ClientToServer,
            },
        }
    }

    pub(super) fn drain(s: &mut Stage) -> Vec<u8> {
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut out = Vec::new();
        loop {
            match s.poll_out(&mut cx) {
                Out::Data(b) => out.extend_from_slice(&b),
                // A dropped reply holds the response open: what came before is all there is.
                Out::Wait if s.hold => return out,
                Out::Wait => panic!("waits"),
                Out::Need | Out::End => return out,
            }
        }
    }

    /// A delayed reply on an event stream waits alone: the stream's later events pass it, and
    /// the stream ends after it (as on stdio and WebSocket, and as two POSTs over HTTP).
    #[tokio::test]
    async fn a_delayed_sse_reply_is_overtaken_by_the_events_after_it() {
        let d = Duration::from_millis(300);
        let mut s = Stage::new(
            vec![fault(1, Action::Delay(d, At::Reply))],
            true,
            1 << 20,
            None,
            None,
        )
        .unwrap();
        let two = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n\n";
        let mut notes = Vec::new();
        s.feed(REPLY, &mut notes);
        s.feed(two, &mut notes);
        s.finish(&mut notes);
        assert_eq!(notes.len(), 1, "{notes:?}");
        let t0 = tokio::time::Instant::now();
        let mut got: Vec<(Vec<u8>, Duration)> = Vec::new();
        std::future::poll_fn(|cx| loop {
            match s.poll_out(cx) {
                Out::Data(b) => got.push((b.to_vec(), t0.elapsed())),
                Out::Wait => return std::task::Poll::Pending,
                Out::Need | Out::End => return std::task::Poll::Ready(()),
            }
        })
        .await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, two, "the later event first");
        assert!(got[0].1 < d, "{:?}", got[0].1);
        assert_eq!(got[1].0, REPLY);
        assert!(got[1].1 >= d, "{:?}", got[1].1);
    }

    /// An event stream whose lines end in a bare `\r` (the format allows it) is framed as the
    /// inspector frames it: the armed fault finds its reply.
    #[test]
    fn a_stream_with_bare_cr_line_endings_gets_its_reply_fault() {
        let mut s = Stage::new(vec![fault(1, Action::WrongId)], true, 1 << 20, None, None).unwrap();
        let cr = b"event: message\rdata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\r\r";
        let mut notes = Vec::new();
        s.feed(cr, &mut notes);
        s.finish(&mut notes);
        assert_eq!(notes.len(), 1, "the fault found its reply: {notes:?}");
        let mut out = Vec::new();
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        while let Out::Data(b) = s.poll_out(&mut cx) {
            out.extend_from_slice(&b);
        }
        let text = String::from_utf8_lossy(&out);
        assert!(!text.contains(r#""id":1,"#), "the id was changed: {text}");
        assert!(
            text.starts_with("event: message\n"),
            "its other fields kept: {text}"
        );
    }

    const PROGRESS: &[u8] =
        b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n";
    const REPLY: &[u8] =
        b"event: message\nid: 7\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";

    const ASK: &[u8] = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"sampling/createMessage\",\"params\":{}}\n\n";

    /// A stage deciding the server's requests under `flags` (s2c rules), and what rpctap sent the
    /// server in the client's place.
    fn asking(flags: &[&str], answers: Arc<Answers>) -> (Stage, Arc<std::sync::Mutex<Vec<Bytes>>>) {
        let specs: Vec<_> = flags
            .iter()
            .map(|f| crate::flow::fault::FaultSpec::parse_flag(f).unwrap())
            .collect();
        let limiter =
            crate::config::limiter(&[], None, &specs, &[], crate::flow::fault::Carrier::Http)
                .unwrap();
        let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
        let to = sent.clone();
        let rq = ServerRequests {
            limiter: Arc::new(limiter),
            peer: std::net::IpAddr::from([127, 0, 0, 1]),
            session: Some("s1".into()),
            headers: http::HeaderMap::new(),
            answer: Box::new(move |b| to.lock().unwrap().push(b)),
            answers,
        };
        (
            Stage::new(vec![], true, 1 << 20, None, Some(rq)).unwrap(),
            sent,
        )
    }

    #[test]
    fn a_servers_request_on_a_stream_is_answered_by_rpctap_held_closed_or_its_answer_armed() {
        let s2c = "direction=s2c,method=sampling/*";
        let answers = Arc::new(Answers::default());
        // `error`: the event never reaches the client; rpctap's error goes to the server.
        let (mut s, sent) = asking(&[&format!("{s2c},error=-32042:no")], answers.clone());
        let mut notes = Vec::new();
        s.feed(&[ASK, PROGRESS].concat(), &mut notes);
        assert_eq!(drain(&mut s), PROGRESS);
        let sent = sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 1);
        let v: serde_json::Value = serde_json::from_slice(&sent[0]).unwrap();
        assert_eq!(
            (v["id"].clone(), v["error"]["code"].clone()),
            (0.into(), (-32042).into())
        );
        assert!(notes[0].answered && notes[0].server_call && notes[0].action == "error");
        // `close`: the stream ends at the request.
        let (mut s, _) = asking(&[&format!("{s2c},close")], answers.clone());
        s.feed(&[PROGRESS, ASK, PROGRESS].concat(), &mut notes);
        assert_eq!(drain(&mut s), PROGRESS);
        assert!(s.ended);
        // A fault on the client's answer: the request passes, the fault armed for its POST.
        let (mut s, _) = asking(&[&format!("{s2c},wrong_id")], answers.clone());
        s.feed(ASK, &mut notes);
        assert_eq!(drain(&mut s), ASK);
        let answer = Bytes::from_static(br#"{"jsonrpc":"2.0","id":0,"result":{}}"#);
        assert!(
            answers.take(Some("other"), &answer).is_none(),
            "another session's"
        );
        let (id, fired, method) = answers.take(Some("s1"), &answer).unwrap();
        assert_eq!(
            (id, &*method),
            (Id::Num("0".into()), "sampling/createMessage")
        );
        assert!(answers.is_empty());
        let (what, made, _) = on_answer(&fired, &answer);
        let OnAnswer::Replace(b) = what else {
            panic!("{what:?}")
        };
        assert_eq!(Some(b.clone()), made);
        assert!(String::from_utf8_lossy(&b).contains("rpctap-wrong-id-0"));
        // A c2s rule on the same method leaves the server's request alone.
        let (mut s, sent) = asking(&["method=sampling/*,drop"], answers.clone());
        s.feed(ASK, &mut notes);
        assert_eq!(drain(&mut s), ASK);
        assert!(sent.lock().unwrap().is_empty() && answers.is_empty());
    }

    #[test]
    fn armed_answers_are_bounded() {
        let a = Answers::default();
        let f = Fired {
            rule: "r".into(),
            action: Action::Drop,
            direction: crate::events::Direction::ServerToClient,
        };
        for i in 0..Answers::MAX + 10 {
            a.arm(
                None,
                &Id::Num(i.to_string().into()),
                f.clone(),
                "sampling/createMessage",
            );
        }
        assert_eq!(
            a.len.load(std::sync::atomic::Ordering::Relaxed),
            Answers::MAX
        );
        let first = Bytes::from_static(br#"{"jsonrpc":"2.0","id":0,"result":{}}"#);
        assert!(a.take(None, &first).is_none(), "the oldest went first");
    }

    #[test]
    fn sse_replies_are_dropped_doubled_and_renamed_and_other_events_pass() {
        for (action, want) in [
            (Action::Drop, vec![PROGRESS.to_vec()]),
            (Action::Duplicate, vec![PROGRESS.to_vec(), REPLY.to_vec(), REPLY.to_vec()]),
            (
                Action::WrongId,
                vec![
                    PROGRESS.to_vec(),
                    b"event: message\nid: 7\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"rpctap-wrong-id-1\",\"result\":{}}\n\n".to_vec(),
                ],
            ),
        ] {
            let mut s = Stage::new(vec![fault(1, action.clone())], true, 1 << 20, None, None).unwrap();
            let mut notes = Vec::new();
            // Cut anywhere: events are whole before a fault acts on them.
            let all = [PROGRESS, REPLY].concat();
            s.feed(&all[..30], &mut notes);
            s.feed(&all[30..], &mut notes);
            s.finish(&mut notes);
            assert_eq!(drain(&mut s), want.concat(), "{action:?}");
            assert_eq!(notes.len(), 1, "{action:?}");
            assert_eq!(notes[0].id.clone().unwrap(), Id::Num("1".into()));
        }
    }

    #[test]
    fn a_stream_is_cut_after_n_events_or_inside_the_next() {
        let mut s = Stage::new(
            vec![fault(
                1,
                Action::CutStreamAfter {
                    n: 1,
                    mid_event: false,
                },
            )],
            true,
            1 << 20,
            None,
            None,
        )
        .unwrap();
        let mut notes = Vec::new();
        s.feed(&[PROGRESS, PROGRESS, REPLY].concat(), &mut notes);
        assert_eq!(drain(&mut s), PROGRESS);
        assert!(s.ended && notes.len() == 1);
        let mut s = Stage::new(
            vec![fault(
                1,
                Action::CutStreamAfter {
                    n: 1,
                    mid_event: true,
                },
            )],
            true,
            1 << 20,
            None,
            None,
        )
        .unwrap();
        s.feed(&[PROGRESS, REPLY].concat(), &mut notes);
        let got = drain(&mut s);
        assert_eq!(&got[..PROGRESS.len()], PROGRESS);
        assert_eq!(got.len(), PROGRESS.len() + REPLY.len() / 2);
    }

    #[test]
    fn json_bodies_change_whole_and_batches_member_by_member() {
        let body = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        let mut s = Stage::new(
            vec![fault(1, Action::Malformed)],
            false,
            1 << 20,
            None,
            None,
        )
        .unwrap();
        let mut notes = Vec::new();
        s.feed(body, &mut notes);
        assert!(drain(&mut s).is_empty(), "held until whole");
        s.finish(&mut notes);
        assert_eq!(drain(&mut s), crate::flow::fault::malformed(body));
        let batch = br#"[{"jsonrpc":"2.0","id":1,"result":1},{"jsonrpc":"2.0","id":2,"result":2}]"#;
        let mut s = Stage::new(vec![fault(2, Action::Drop)], false, 1 << 20, None, None).unwrap();
        s.feed(batch, &mut notes);
        s.finish(&mut notes);
        assert_eq!(drain(&mut s), br#"[{"jsonrpc":"2.0","id":1,"result":1}]"#);
        // A dropped single reply is held: the body never ends.
        let mut s = Stage::new(vec![fault(1, Action::Drop)], false, 1 << 20, None, None).unwrap();
        s.feed(body, &mut notes);
        s.finish(&mut notes);
        let waker = futures_util::task::noop_waker();
        assert!(matches!(
            s.poll_out(&mut Context::from_waker(&waker)),
            Out::Wait
        ));
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use crate::limit::enforce::CallFault;
    use proptest::prelude::*;

    /// `body` fed to the stage in pieces cut at `cuts`, its output read after each: what came
    /// out, and the notes.
    fn through(s: &mut Stage, body: &[u8], cuts: Vec<usize>) -> (Vec<u8>, Vec<Note>) {
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
        cuts.sort();
        let (mut at, mut out, mut notes) = (0, Vec::new(), Vec::new());
        for c in cuts.into_iter().chain([body.len()]) {
            s.feed(&body[at..c], &mut notes);
            out.extend(super::tests::drain(s));
            at = c;
        }
        s.finish(&mut notes);
        out.extend(super::tests::drain(s));
        (out, notes)
    }

    fn event(id: u8, reply: bool, crlf: bool) -> Vec<u8> {
        let nl = if crlf { "\r\n" } else { "\n" };
        let data = if reply {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
        } else {
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#.to_string()
        };
        format!("event: message{nl}data: {data}{nl}{nl}").into_bytes()
    }

    proptest! {
        /// Any bytes through a stage whose fault matches none of them come out unchanged,
        /// however they are cut.
        #[test]
        fn what_no_fault_touches_passes_byte_for_byte(
            body in proptest::collection::vec(any::<u8>(), 0..600),
            cuts in proptest::collection::vec(0usize..600, 0..6),
            sse in any::<bool>(),
        ) {
            let f = CallFault {
                id: Id::Str("never-seen".into()),
                method: "tools/call".into(),
                fired: Fired { rule: "r".into(), action: Action::Duplicate, direction: crate::events::Direction::ClientToServer },
            };
            let mut s = Stage::new(vec![f], sse, 1 << 20, None, None).unwrap();
            let (out, notes) = through(&mut s, &body, cuts);
            prop_assert_eq!(out, body);
            prop_assert!(notes.is_empty());
        }

        /// An SSE stream of progress and replies, cut anywhere: a dropped reply is the only
        /// event missing, everything else in order and unchanged.
        #[test]
        fn a_dropped_sse_reply_is_the_only_event_missing(
            events in proptest::collection::vec((0u8..5, any::<bool>(), any::<bool>()), 1..12),
            victim in 0u8..5,
            cuts in proptest::collection::vec(0usize..2000, 0..8),
        ) {
            let body: Vec<u8> = events.iter().flat_map(|(id, r, crlf)| event(*id, *r, *crlf)).collect();
            // The first reply with the victim's id is the one dropped.
            let mut dropped = false;
            let want: Vec<u8> = events
                .iter()
                .filter(|(id, r, _)| {
                    let hit = *r && *id == victim && !dropped;
                    dropped |= hit;
                    !hit
                })
                .flat_map(|(id, r, crlf)| event(*id, *r, *crlf))
                .collect();
            let f = CallFault {
                id: Id::Num(victim.to_string().into()),
                method: "tools/call".into(),
                fired: Fired { rule: "r".into(), action: Action::Drop, direction: crate::events::Direction::ClientToServer },
            };
            let mut s = Stage::new(vec![f], true, 1 << 20, None, None).unwrap();
            let (out, notes) = through(&mut s, &body, cuts);
            prop_assert_eq!(out, want);
            prop_assert_eq!(notes.len(), usize::from(dropped));
        }
    }
}
