//! The acting pipeline's decisions: what happens to a message on its way, decided once for
//! every transport by a list of [`Stage`]s.
//!
//! A stage sees one message as a [`Msg`] (its direction, kind, method, tool or resource, and the
//! keys rules match on: session, peer, headers) and returns a [`Verdict`]: pass it on, or act —
//! a [`Fired`] naming the rule and its [`crate::flow::fault::Action`]: answer in the peer's place (an
//! `Error`: the call never reaches the peer, a refusal), drop, delay, throttle, close, or
//! replace the reply's bytes (`Edit`). The first stage that acts decides; the others are not
//! asked. The list is built once from the options with the rules it holds
//! ([`crate::limit::Limiter`]) and swapped whole with them on a SIGHUP reload.
//!
//! Transports never look inside a stage: they carry the verdicts out in their own framing
//! through the same few functions (`crate::limit::enforce` for the call, `crate::flow::fault::reshape`
//! for the reply), so a new stage is a file here and its config section — [`deny`] is one.
//!
//! The rate limits are decided before the stages (in `Limiter::check_with`): they hold permits
//! until a call ends and may ask a shared store first, which a synchronous verdict cannot carry.
//!
//! A stage that panics is removed with a logged notice and the message passes it, as a
//! panicking observer is dropped from the bus: one broken rule must not stop the traffic.

pub mod deny;
pub mod fault;
pub mod intercept;

use crate::events::Direction;
use crate::flow::fault::Fired;
use crate::rpc::{CallInfo, Kind};
use std::sync::atomic::{AtomicBool, Ordering};

/// One message as the stages see it.
pub struct Msg<'a> {
    /// Whose message: the client's (`ClientToServer`) or the server's request.
    pub dir: Direction,
    /// `Request`, `Notification` — or `Invalid` for a message that names a method a lenient
    /// peer may still execute.
    pub kind: Kind,
    pub call: &'a CallInfo<'a>,
    pub session: Option<&'a str>,
    pub peer: std::net::IpAddr,
    /// The client's request headers (HTTP and WebSocket: the upgrade request's; none on stdio).
    pub headers: &'a http::HeaderMap,
}

/// What a stage makes of a message.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Pass,
    /// The rule that fired and what it does.
    Act(Fired),
}

/// One step of the pipeline.
pub trait Stage: Send + Sync {
    /// As notices name it.
    fn name(&self) -> &str;
    /// Whether it decides messages of this direction at all (asked before each message; a
    /// direction no stage wants costs nothing more).
    fn wants(&self, dir: Direction) -> bool;
    fn decide(&self, msg: &Msg<'_>) -> Verdict;
}

struct Slot {
    stage: Box<dyn Stage>,
    /// Set when it panicked: it is passed from then on.
    removed: AtomicBool,
}

/// The stages in force, in order.
#[derive(Default)]
pub struct Stages {
    slots: Vec<Slot>,
}

impl std::fmt::Debug for Stages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.slots.iter().map(|s| s.stage.name()))
            .finish()
    }
}

impl Stages {
    pub fn new(stages: Vec<Box<dyn Stage>>) -> Stages {
        Stages {
            slots: stages
                .into_iter()
                .map(|stage| Slot {
                    stage,
                    removed: AtomicBool::new(false),
                })
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether a stage decides messages of direction `dir`.
    pub fn wants(&self, dir: Direction) -> bool {
        self.slots
            .iter()
            .any(|s| !s.removed.load(Ordering::Relaxed) && s.stage.wants(dir))
    }

    /// The first stage's action on `msg`; `None` when every stage passes it.
    pub fn decide(&self, msg: &Msg<'_>) -> Option<Fired> {
        for s in &self.slots {
            if s.removed.load(Ordering::Relaxed) || !s.stage.wants(msg.dir) {
                continue;
            }
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.stage.decide(msg))) {
                Ok(Verdict::Pass) => {}
                Ok(Verdict::Act(f)) => return Some(f),
                Err(_) => {
                    if !s.removed.swap(true, Ordering::Relaxed) {
                        tracing::error!(
                            stage = s.stage.name(),
                            method = msg.call.method,
                            "a pipeline stage panicked: removed, messages pass it from now on"
                        );
                    }
                }
            }
        }
        None
    }
}

/// The `[[fault]]` rules as a stage: a request of the direction a rule names, matched and
/// counted as `crate::flow::fault` says.
pub struct FaultStage(pub std::sync::Arc<crate::flow::fault::Faults>);

impl Stage for FaultStage {
    fn name(&self) -> &str {
        "fault"
    }
    fn wants(&self, dir: Direction) -> bool {
        dir == Direction::ClientToServer || self.0.has_s2c()
    }
    fn decide(&self, m: &Msg<'_>) -> Verdict {
        if m.kind != Kind::Request {
            return Verdict::Pass;
        }
        match self
            .0
            .decide_in(m.dir, m.call, m.session, m.peer, m.headers)
        {
            Some(f) => Verdict::Act(f),
            None => Verdict::Pass,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Boom;
    impl Stage for Boom {
        fn name(&self) -> &str {
            "boom"
        }
        fn wants(&self, _: Direction) -> bool {
            true
        }
        fn decide(&self, _: &Msg<'_>) -> Verdict {
            panic!("a broken stage")
        }
    }

    struct Always(&'static str);
    impl Stage for Always {
        fn name(&self) -> &str {
            self.0
        }
        fn wants(&self, dir: Direction) -> bool {
            dir == Direction::ClientToServer
        }
        fn decide(&self, _: &Msg<'_>) -> Verdict {
            Verdict::Act(Fired {
                rule: self.0.into(),
                action: crate::flow::fault::Action::Drop,
                direction: Direction::ClientToServer,
            })
        }
    }

    #[test]
    fn the_first_stage_that_acts_decides_and_a_panicking_one_is_removed() {
        let stages = Stages::new(vec![
            Box::new(Boom),
            Box::new(Always("first")),
            Box::new(Always("second")),
        ]);
        let call = CallInfo {
            method: "tools/call",
            tool: Some("x"),
            resource: None,
            raw: b"",
        };
        let h = http::HeaderMap::new();
        let msg = |dir| Msg {
            dir,
            kind: Kind::Request,
            call: &call,
            session: None,
            peer: std::net::Ipv4Addr::LOCALHOST.into(),
            headers: &h,
        };
        for _ in 0..2 {
            let f = stages.decide(&msg(Direction::ClientToServer)).unwrap();
            assert_eq!(&*f.rule, "first");
        }
        assert!(stages.slots[0].removed.load(Ordering::Relaxed));
        // The panicking stage removed, no stage wants the server's requests.
        assert!(!stages.wants(Direction::ServerToClient));
        assert_eq!(stages.decide(&msg(Direction::ServerToClient)), None);
        assert_eq!(format!("{stages:?}"), r#"["boom", "first", "second"]"#);
    }
}
