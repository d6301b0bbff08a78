//! The dashboard's rows as the filter language (`crate::filter`) sees them.

use super::{Row, RowOutcome};
use crate::events::Direction;
use crate::filter::{Status, Subject};
use std::borrow::Cow;

impl Subject for Row {
    fn method(&self) -> &str {
        &self.method
    }
    fn target(&self) -> Option<&str> {
        self.target.as_deref()
    }
    fn id(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.id)
    }
    fn scope(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.scope)
    }
    fn server(&self) -> &str {
        &self.server
    }
    fn conversation(&self) -> Option<Cow<'_, str>> {
        self.conversation.as_deref().map(Cow::Borrowed)
    }
    fn skill(&self) -> Option<String> {
        crate::rpc::a2a::message_skill(&self.method, self.request.as_deref()?.as_bytes())
    }
    fn direction(&self) -> Option<Direction> {
        Some(self.direction)
    }
    fn status(&self) -> Status {
        match &self.outcome {
            RowOutcome::Pending => Status::Pending,
            RowOutcome::Notification => Status::Notification,
            RowOutcome::Result => Status::Ok,
            RowOutcome::InputRequired => Status::Input,
            RowOutcome::Error(_) | RowOutcome::Rejected(_) => Status::Error,
            RowOutcome::Missing(_) => Status::Missing,
            RowOutcome::Cancelled(_) | RowOutcome::Abandoned(_) => Status::Cancelled,
            RowOutcome::Refused(_) => Status::Refused,
            RowOutcome::Http(s) if *s >= 400 => Status::Error,
            RowOutcome::Http(_) => Status::Other,
        }
    }
    fn codes(&self) -> Vec<&str> {
        self.anomalies.iter().map(String::as_str).collect()
    }
    fn is_http(&self) -> bool {
        self.transport == "http"
    }
    fn has_text(&self, lower: &str) -> bool {
        let has = |s: &str| s.to_lowercase().contains(lower);
        has(&self.method)
            || self.target.as_deref().is_some_and(has)
            || has(&self.id)
            || self.request.as_deref().is_some_and(has)
            || self.reply.as_deref().is_some_and(has)
    }
}
