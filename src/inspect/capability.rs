//! MCP capabilities: what each side declared in `initialize` (a small bit set read from the
//! `capabilities` object), and which capability each request or notification needs — the table
//! behind `MCP_CAPABILITY`.

use crate::events::Direction;

/// The MCP revision from which a client declares its capabilities per request (`_meta`), opts
/// into logs per request, and asks for input in `input_required` rounds (2026-07-28).
pub const MODERN: &str = "2026-07-28";

/// The tasks extension's identifier (2026-07-28, SEP-2663).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Declared capabilities, one bit each (client and server bits never overlap, so one type
/// serves both sides).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps(pub(super) u32);

impl Caps {
    pub const SAMPLING: Caps = Caps(1);
    pub const ELICITATION: Caps = Caps(1 << 1);
    pub const ROOTS: Caps = Caps(1 << 2);
    pub const ROOTS_LIST_CHANGED: Caps = Caps(1 << 3);
    pub const TOOLS: Caps = Caps(1 << 8);
    pub const TOOLS_LIST_CHANGED: Caps = Caps(1 << 9);
    pub const RESOURCES: Caps = Caps(1 << 10);
    pub const RESOURCES_SUBSCRIBE: Caps = Caps(1 << 11);
    pub const RESOURCES_LIST_CHANGED: Caps = Caps(1 << 12);
    pub const PROMPTS: Caps = Caps(1 << 13);
    pub const PROMPTS_LIST_CHANGED: Caps = Caps(1 << 14);
    pub const LOGGING: Caps = Caps(1 << 15);
    pub const COMPLETIONS: Caps = Caps(1 << 16);
    /// The tasks extension (`extensions["io.modelcontextprotocol/tasks"]`, 2026-07-28), either
    /// side.
    pub const TASKS_EXT: Caps = Caps(1 << 24);

    pub fn has(self, c: Caps) -> bool {
        self.0 & c.0 == c.0
    }

    fn set(&mut self, c: Caps) {
        self.0 |= c.0;
    }

    /// The capabilities a `capabilities` object declares. A capability is declared when its
    /// member is present and neither `null` nor `false`; a sub-capability (`listChanged`,
    /// `subscribe`) when it is `true`.
    pub fn from_json(caps: &serde_json::Value) -> Caps {
        let mut out = Caps::default();
        let Some(obj) = caps.as_object() else {
            return out;
        };
        let declared =
            |v: &serde_json::Value| !(v.is_null() || v == &serde_json::Value::Bool(false));
        let flag =
            |v: &serde_json::Value, k: &str| v.get(k).and_then(|b| b.as_bool()) == Some(true);
        for (name, top, subs) in [
            ("sampling", Caps::SAMPLING, &[][..]),
            ("elicitation", Caps::ELICITATION, &[][..]),
            (
                "roots",
                Caps::ROOTS,
                &[("listChanged", Caps::ROOTS_LIST_CHANGED)][..],
            ),
            (
                "tools",
                Caps::TOOLS,
                &[("listChanged", Caps::TOOLS_LIST_CHANGED)][..],
            ),
            (
                "resources",
                Caps::RESOURCES,
                &[
                    ("subscribe", Caps::RESOURCES_SUBSCRIBE),
                    ("listChanged", Caps::RESOURCES_LIST_CHANGED),
                ][..],
            ),
            (
                "prompts",
                Caps::PROMPTS,
                &[("listChanged", Caps::PROMPTS_LIST_CHANGED)][..],
            ),
            ("logging", Caps::LOGGING, &[][..]),
            ("completions", Caps::COMPLETIONS, &[][..]),
        ] {
            if let Some(v) = obj.get(name).filter(|v| declared(v)) {
                out.set(top);
                for (k, c) in subs {
                    if flag(v, k) {
                        out.set(*c);
                    }
                }
            }
        }
        if obj
            .get("extensions")
            .and_then(|e| e.get(TASKS_EXTENSION))
            .is_some_and(declared)
        {
            out.set(Caps::TASKS_EXT);
        }
        out
    }
}

/// Who must have declared a capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

/// What a message needs: the side that must have declared it, the capability, and its name as
/// the specification writes it (for the message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    pub side: Side,
    pub caps: Caps,
    pub name: &'static str,
}

/// The capability a message with `method`, sent in direction `dir`, needs under the protocol
/// `version` the session negotiated; `None` when it needs none (or goes the other way, which is
/// not a capability matter).
pub fn needed(method: &str, dir: Direction, version: &str) -> Option<Need> {
    use Direction::*;
    let server = |caps, name| {
        Some(Need {
            side: Side::Server,
            caps,
            name,
        })
    };
    let client = |caps, name| {
        Some(Need {
            side: Side::Client,
            caps,
            name,
        })
    };
    match (dir, method) {
        (ClientToServer, "tools/list" | "tools/call") => server(Caps::TOOLS, "tools"),
        (ClientToServer, "resources/list" | "resources/read" | "resources/templates/list") => {
            server(Caps::RESOURCES, "resources")
        }
        (ClientToServer, "resources/subscribe" | "resources/unsubscribe") => server(
            Caps(Caps::RESOURCES.0 | Caps::RESOURCES_SUBSCRIBE.0),
            "resources.subscribe",
        ),
        (ClientToServer, "prompts/list" | "prompts/get") => server(Caps::PROMPTS, "prompts"),
        (ClientToServer, "logging/setLevel") => server(Caps::LOGGING, "logging"),
        // The `completions` capability arrived with 2025-03-26; before it, `completion/complete`
        // needed none.
        (ClientToServer, "completion/complete") if version >= "2025-03-26" => {
            server(Caps::COMPLETIONS, "completions")
        }
        (ServerToClient, "notifications/tools/list_changed") => server(
            Caps(Caps::TOOLS.0 | Caps::TOOLS_LIST_CHANGED.0),
            "tools.listChanged",
        ),
        (ServerToClient, "notifications/resources/list_changed") => server(
            Caps(Caps::RESOURCES.0 | Caps::RESOURCES_LIST_CHANGED.0),
            "resources.listChanged",
        ),
        (ServerToClient, "notifications/resources/updated") => server(
            Caps(Caps::RESOURCES.0 | Caps::RESOURCES_SUBSCRIBE.0),
            "resources.subscribe",
        ),
        (ServerToClient, "notifications/prompts/list_changed") => server(
            Caps(Caps::PROMPTS.0 | Caps::PROMPTS_LIST_CHANGED.0),
            "prompts.listChanged",
        ),
        // From 2026-07-28 a client opts into logs per request (`_meta` logLevel).
        (ServerToClient, "notifications/message") if version < MODERN => {
            server(Caps::LOGGING, "logging")
        }
        (ServerToClient, "sampling/createMessage") => client(Caps::SAMPLING, "sampling"),
        (ServerToClient, "elicitation/create") => client(Caps::ELICITATION, "elicitation"),
        (ServerToClient, "roots/list") => client(Caps::ROOTS, "roots"),
        (ClientToServer, "notifications/roots/list_changed") => client(
            Caps(Caps::ROOTS.0 | Caps::ROOTS_LIST_CHANGED.0),
            "roots.listChanged",
        ),
        _ => None,
    }
}

/// The one direction an MCP method may be sent in (`None`: either, or not MCP's): a client's
/// requests (`initialize`, the tools, resources and prompts, …) never come from the server, the
/// server's (`sampling/createMessage`, `elicitation/create`, `roots/list`) never from the
/// client; likewise their notifications.
pub fn only_direction(method: &str) -> Option<Direction> {
    use Direction::*;
    match method {
        "initialize"
        | "notifications/initialized"
        | "server/discover"
        | "tools/list"
        | "tools/call"
        | "resources/list"
        | "resources/read"
        | "resources/templates/list"
        | "resources/subscribe"
        | "resources/unsubscribe"
        | "prompts/list"
        | "prompts/get"
        | "logging/setLevel"
        | "completion/complete"
        | "subscriptions/listen"
        | "notifications/roots/list_changed" => Some(ClientToServer),
        "sampling/createMessage"
        | "elicitation/create"
        | "roots/list"
        | "notifications/tools/list_changed"
        | "notifications/resources/list_changed"
        | "notifications/resources/updated"
        | "notifications/prompts/list_changed"
        | "notifications/message" => Some(ServerToClient),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_declared_capabilities_and_their_flags() {
        let c = Caps::from_json(&serde_json::json!({
            "tools": {"listChanged": true},
            "resources": {"subscribe": false},
            "prompts": null,
            "logging": {},
            "experimental": {"x": {}}
        }));
        assert!(c.has(Caps::TOOLS) && c.has(Caps::TOOLS_LIST_CHANGED));
        assert!(c.has(Caps::RESOURCES) && !c.has(Caps::RESOURCES_SUBSCRIBE));
        assert!(!c.has(Caps::PROMPTS), "null is not a declaration");
        assert!(c.has(Caps::LOGGING) && !c.has(Caps::COMPLETIONS));
    }

    #[test]
    fn the_table_knows_each_direction() {
        let n = needed(
            "sampling/createMessage",
            Direction::ServerToClient,
            "2025-06-18",
        );
        assert_eq!(n.map(|n| n.side), Some(Side::Client));
        assert_eq!(
            needed(
                "sampling/createMessage",
                Direction::ClientToServer,
                "2025-06-18"
            ),
            None
        );
        assert_eq!(
            needed(
                "completion/complete",
                Direction::ClientToServer,
                "2024-11-05"
            ),
            None
        );
        assert!(needed(
            "completion/complete",
            Direction::ClientToServer,
            "2025-03-26"
        )
        .is_some());
        assert_eq!(
            needed("ping", Direction::ClientToServer, "2025-06-18"),
            None
        );
    }
}
