//! Subscriptions on a stream (a WebSocket, stdio): a call whose method ends in `subscribe`
//! (`eth_subscribe`, …) and whose result is a subscription id, the server notifications that
//! carry it (`params.subscription`, as `eth_subscription` does) — attributed to it: their
//! message's target is the subscription id, as is the call's — and the `…unsubscribe` call that
//! ends it. Kept per stream, at most [`MAX_SUBSCRIPTIONS`].

use super::*;
use serde::Deserialize;
use std::collections::HashMap;

/// The most subscriptions one stream remembers; beyond it new ones are not attributed.
pub const MAX_SUBSCRIPTIONS: usize = 1024;

/// A stream's live subscriptions: id (as JSON text) → the method that made it.
pub(super) type Subscriptions = HashMap<Box<str>, Arc<str>>;

fn is_subscribe(method: &str) -> bool {
    method.ends_with("subscribe") && !method.ends_with("unsubscribe")
}

#[derive(Deserialize)]
struct Res<'a> {
    #[serde(borrow)]
    result: &'a serde_json::value::RawValue,
}

#[derive(Deserialize)]
struct Note<'a> {
    #[serde(borrow)]
    params: NoteParams<'a>,
}

#[derive(Deserialize)]
struct NoteParams<'a> {
    #[serde(borrow)]
    subscription: &'a serde_json::value::RawValue,
}

#[derive(Deserialize)]
struct Unsub<'a> {
    #[serde(borrow)]
    params: Vec<&'a serde_json::value::RawValue>,
}

/// A subscription id as shown: a string's text, a number's digits.
fn label(raw: &str) -> Option<Box<str>> {
    if raw.starts_with('"') {
        serde_json::from_str::<String>(raw).ok().map(Into::into)
    } else if raw.bytes().all(|b| b.is_ascii_digit()) && !raw.is_empty() {
        Some(raw.into())
    } else {
        None
    }
}

impl ExchangeCtx {
    /// A call's result: a subscribe call's result is its subscription id, which becomes the
    /// call's target; a successful unsubscribe ends the subscription it names.
    pub(super) fn subscription_reply(&mut self, p: &mut Pending, env: &Envelope) {
        if !self.stream || env.kind != Kind::Result {
            return;
        }
        if is_subscribe(&p.method) {
            let Some(id) = serde_json::from_slice::<Res<'_>>(&env.raw)
                .ok()
                .and_then(|r| label(r.result.get()))
            else {
                return;
            };
            let subs = self.subs.get_or_insert_with(Default::default);
            if subs.len() < MAX_SUBSCRIPTIONS {
                subs.insert(id.clone(), p.method.clone());
            }
            p.target = Some(Arc::from(&*id));
        } else if p.method.ends_with("unsubscribe") {
            if let (Some(subs), Some(id)) = (&mut self.subs, p.target.as_deref()) {
                subs.remove(id);
            }
        }
    }

    /// A notification: the subscription it carries, if this stream made it.
    pub(super) fn subscription_of(&self, env: &Envelope) -> Option<Arc<str>> {
        let subs = self.subs.as_ref().filter(|s| !s.is_empty())?;
        needle!(SUBSCRIPTION, "\"subscription\"");
        SUBSCRIPTION.find(&env.raw)?;
        let n = serde_json::from_slice::<Note<'_>>(&env.raw).ok()?;
        let id = label(n.params.subscription.get())?;
        subs.contains_key(&id).then(|| Arc::from(&*id))
    }

    /// An unsubscribe request's first parameter (the subscription it ends), as its target.
    pub(super) fn unsubscribe_target(method: &str, env: &Envelope) -> Option<Arc<str>> {
        if !method.ends_with("unsubscribe") {
            return None;
        }
        let u = serde_json::from_slice::<Unsub<'_>>(&env.raw).ok()?;
        label(u.params.first()?.get()).map(|l| Arc::from(&*l))
    }
}
