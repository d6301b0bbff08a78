//! Desktop clients' MCP configs: where each client keeps its file, and how a stdio server
//! entry is wrapped to run through `rpctap stdio --label NAME --` and unwrapped again.
//!
//! Claude Desktop, Claude Code and Cursor list servers under `mcpServers`, VS Code under
//! `servers`; an entry with a `command` (and no `url`, and no `type` other than `stdio`) is a
//! stdio server. The file is read as JSON, or as JSON with comments and trailing commas (VS
//! Code's), into a concrete syntax tree (`jsonc-parser`'s, a maintained crate): an edit sets the
//! wrapped entries' `command` and `args` and leaves every comment, blank and comma where it was.
//! The original is kept byte for byte beside it (`FILE.rpctap.bak`), which `unwrap` restores.

use jsonc_parser::cst::{CstInputValue, CstObject, CstRootNode};
use jsonc_parser::ParseOptions;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// The keys servers are listed under.
const KEYS: [&str; 2] = ["mcpServers", "servers"];

/// Where `wrap` keeps the original.
pub fn backup_path(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_os_string();
    s.push(".rpctap.bak");
    PathBuf::from(s)
}

/// Where `unwrap` keeps the file it undid entry by entry (it no longer matched `wrap`'s backup).
pub fn unwrap_backup_path(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_os_string();
    s.push(".rpctap-unwrap.bak");
    PathBuf::from(s)
}

/// A client's config files, most likely first (`home`: the user's home; `cwd`: the project).
pub fn default_paths(client: crate::cli::ClientKind, home: &Path, cwd: &Path) -> Vec<PathBuf> {
    use crate::cli::ClientKind::*;
    match client {
        ClaudeDesktop => {
            let mut v = vec![];
            if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
                v.push(PathBuf::from(x).join("Claude/claude_desktop_config.json"));
            }
            v.push(home.join(".config/Claude/claude_desktop_config.json"));
            v.push(home.join("Library/Application Support/Claude/claude_desktop_config.json"));
            if let Some(a) = std::env::var_os("APPDATA") {
                v.push(PathBuf::from(a).join("Claude/claude_desktop_config.json"));
            }
            v
        }
        ClaudeCode => vec![cwd.join(".mcp.json")],
        Cursor => vec![cwd.join(".cursor/mcp.json"), home.join(".cursor/mcp.json")],
        Vscode => vec![cwd.join(".vscode/mcp.json")],
    }
}

/// What happened to one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Wrapped(String),
    Unwrapped(String),
    /// Already wrapped (wrap) or not wrapped (unwrap).
    Unchanged(String),
    /// A URL (remote) entry: left alone.
    Remote(String),
}

/// Config errors.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("not a JSON config: {0}")]
    Json(String),
    #[error("no `mcpServers` or `servers` object: not an MCP client config")]
    NoServers,
}

/// How client configs are read: JSON, or JSON with comments and trailing commas (VS Code's);
/// nothing looser, so a file a client would refuse is not taken for a config.
fn options() -> ParseOptions {
    ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        allow_loose_object_property_names: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    }
}

/// A config as its concrete syntax tree: every comment, blank and comma kept, so an edit
/// changes the values it sets and nothing else.
fn parse(text: &str) -> Result<CstRootNode, ClientError> {
    CstRootNode::parse(text, &options()).map_err(|e| ClientError::Json(e.to_string()))
}

/// A server entry: its name, its object in the tree, and its value.
type Entry = (String, CstObject, Map<String, Value>);

/// Each server entry of the config.
fn entries(root: &CstRootNode) -> Result<Vec<Entry>, ClientError> {
    let top = root.object_value().ok_or(ClientError::NoServers)?;
    let lists: Vec<CstObject> = KEYS.iter().filter_map(|k| top.object_value(k)).collect();
    if lists.is_empty() {
        return Err(ClientError::NoServers);
    }
    let mut out = Vec::new();
    for list in lists {
        for prop in list.properties() {
            let (Some(name), Some(obj)) = (prop.decoded_name(), prop.object_value()) else {
                continue;
            };
            if let Some(Value::Object(v)) = obj.to_serde_value() {
                out.push((name, obj, v));
            }
        }
    }
    Ok(out)
}

/// A JSON value as the tree takes it.
fn input(v: &Value) -> CstInputValue {
    match v {
        Value::Null => CstInputValue::Null,
        Value::Bool(b) => CstInputValue::Bool(*b),
        Value::Number(n) => CstInputValue::Number(n.to_string()),
        Value::String(s) => CstInputValue::String(s.clone()),
        Value::Array(a) => CstInputValue::Array(a.iter().map(input).collect()),
        Value::Object(o) => {
            CstInputValue::Object(o.iter().map(|(k, v)| (k.clone(), input(v))).collect())
        }
    }
}

/// Wraps an entry in place: `command` becomes `rpctap`, and `prefix` goes before the
/// existing arguments (inserted into the array, so its comments and layout stay), or becomes
/// `args` when the entry had none.
fn set_wrapped(obj: &CstObject, rpctap: &str, prefix: &[Value]) {
    if let Some(p) = obj.get("command") {
        p.set_value(CstInputValue::String(rpctap.to_string()));
    }
    match obj.get("args").map(|p| (p.array_value(), p)) {
        Some((Some(arr), _)) => {
            for v in prefix.iter().rev() {
                arr.insert(0, input(v));
            }
        }
        Some((None, p)) => p.set_value(CstInputValue::Array(prefix.iter().map(input).collect())),
        None => {
            let at = obj
                .get("command")
                .map_or(obj.properties().len(), |p| p.property_index() + 1);
            obj.insert(
                at,
                "args",
                CstInputValue::Array(prefix.iter().map(input).collect()),
            );
        }
    }
}

/// Unwraps an entry in place: `command` becomes `cmd`, the arguments up to it go (element by
/// element, so the rest keep their comments and layout), and an `args` left empty goes too
/// (`wrap` adds one to an entry that had none).
fn set_unwrapped(obj: &CstObject, cmd: &Value, upto: usize) {
    if let Some(p) = obj.get("command") {
        p.set_value(input(cmd));
    }
    let Some(p) = obj.get("args") else { return };
    let Some(arr) = p.array_value() else { return };
    // From the last one taken back to the first (as `wrap` inserts them), which leaves the
    // blanks between the rest as they were.
    let gone: Vec<_> = arr.elements().into_iter().take(upto + 1).collect();
    // Blanks after `[`: the last one removed leaves its own before the next element.
    let lead = |arr: &jsonc_parser::cst::CstArray| -> Vec<_> {
        arr.children()
            .into_iter()
            .skip(1)
            .take_while(|c| c.is_whitespace())
            .collect()
    };
    let had_lead = !lead(&arr).is_empty();
    for e in gone.into_iter().rev() {
        e.remove();
    }
    if !had_lead {
        lead(&arr).into_iter().for_each(|w| w.remove());
    }
    if arr.elements().is_empty() {
        p.remove();
    }
}

fn is_stdio(e: &Map<String, Value>) -> bool {
    e.get("command").is_some_and(Value::is_string)
        && e.get("url").is_none()
        && e.get("type")
            .and_then(Value::as_str)
            .is_none_or(|t| t == "stdio")
}

fn args_of(e: &Map<String, Value>) -> Vec<Value> {
    e.get("args")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Whether an entry runs through rpctap already: its program is an rpctap and its arguments
/// are `stdio … -- CMD …`.
fn is_wrapped(e: &Map<String, Value>) -> bool {
    let prog = e.get("command").and_then(Value::as_str).unwrap_or("");
    let base = prog.rsplit(['/', '\\']).next().unwrap_or(prog);
    let args = args_of(e);
    base.starts_with("rpctap")
        && args.first().and_then(Value::as_str) == Some("stdio")
        && args.iter().any(|a| a.as_str() == Some("--"))
}

/// Whether the config has an entry that runs through rpctap (what `unwrap` has to undo).
pub fn has_wrapped(text: &str) -> Result<bool, ClientError> {
    Ok(entries(&parse(text)?)?
        .iter()
        .any(|(_, _, e)| is_wrapped(e)))
}

/// The rpctap program a wrapped config runs, if any entry is wrapped.
pub fn wrapped_with(text: &str) -> Option<String> {
    let root = parse(text).ok()?;
    entries(&root).ok()?.into_iter().find_map(|(_, _, e)| {
        is_wrapped(&e)
            .then(|| e.get("command")?.as_str().map(str::to_string))
            .flatten()
    })
}

/// The config with each stdio server wrapped (`rpctap`: the program the entries run); only
/// those entries' `command` and `args` change, comments and layout stay.
pub fn wrap(text: &str, rpctap: &str) -> Result<(String, Vec<Change>), ClientError> {
    let root = parse(text)?;
    let mut changes = Vec::new();
    for (name, obj, e) in entries(&root)? {
        if !is_stdio(&e) {
            changes.push(Change::Remote(name));
            continue;
        }
        if is_wrapped(&e) {
            changes.push(Change::Unchanged(name));
            continue;
        }
        let cmd = e.get("command").cloned().unwrap_or(Value::Null);
        let args = [
            Value::from("stdio"),
            Value::from("--label"),
            Value::from(super::command::sanitize(&name)),
            Value::from("--"),
            cmd,
        ];
        set_wrapped(&obj, rpctap, &args);
        changes.push(Change::Wrapped(name));
    }
    Ok((root.to_string(), changes))
}

/// The config with each wrapped entry back to its own command, entry by entry (used when the
/// file changed since `wrap`, so its backup no longer matches); comments and layout stay.
pub fn unwrap(text: &str) -> Result<(String, Vec<Change>), ClientError> {
    let root = parse(text)?;
    let mut changes = Vec::new();
    for (name, obj, e) in entries(&root)? {
        if !is_wrapped(&e) {
            changes.push(Change::Unchanged(name));
            continue;
        }
        let args = args_of(&e);
        let Some(sep) = args.iter().position(|a| a.as_str() == Some("--")) else {
            continue;
        };
        let Some(cmd) = args.get(sep + 1) else {
            continue;
        };
        set_unwrapped(&obj, cmd, sep + 1);
        changes.push(Change::Unwrapped(name));
    }
    Ok((root.to_string(), changes))
}

/// A line diff of two texts (`-`/`+`/` ` lines), for `--dry-run`.
pub fn diff(a: &str, b: &str) -> String {
    let (x, y): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    // Configs are small; beyond this the diff is the two texts whole.
    if x.len() * y.len() > 4_000_000 {
        return format!("--- before\n{a}\n+++ after\n{b}");
    }
    let mut l = vec![vec![0u32; y.len() + 1]; x.len() + 1];
    for i in (0..x.len()).rev() {
        for j in (0..y.len()).rev() {
            l[i][j] = if x[i] == y[j] {
                l[i + 1][j + 1] + 1
            } else {
                l[i + 1][j].max(l[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < x.len() || j < y.len() {
        if i < x.len() && j < y.len() && x[i] == y[j] {
            out.push_str(&format!("  {}\n", x[i]));
            i += 1;
            j += 1;
        } else if i < x.len() && (j == y.len() || l[i + 1][j] >= l[i][j + 1]) {
            out.push_str(&format!("- {}\n", x[i]));
            i += 1;
        } else {
            out.push_str(&format!("+ {}\n", y[j]));
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const VSCODE: &str = r#"{
	// servers for this workspace
	"servers": {
		"fs": { "type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."], },
		"remote": { "type": "http", "url": "https://example.com/mcp" },
	},
	"inputs": []
}
"#;

    fn value(text: &str) -> Value {
        parse(text)
            .unwrap()
            .value()
            .unwrap()
            .to_serde_value()
            .unwrap()
    }

    #[test]
    fn wrap_is_idempotent_leaves_remote_entries_and_unwrap_inverts_it() {
        let (w, changes) = wrap(VSCODE, "/usr/bin/rpctap").unwrap();
        assert_eq!(
            changes,
            [
                Change::Wrapped("fs".into()),
                Change::Remote("remote".into())
            ]
        );
        // Only the entry's command and args changed: the comment, the tabs and the trailing
        // commas are where they were.
        let expected = VSCODE.replace(
            r#""command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."]"#,
            r#""command": "/usr/bin/rpctap", "args": ["stdio", "--label", "fs", "--", "npx", "-y", "@modelcontextprotocol/server-filesystem", "."]"#,
        );
        assert_eq!(w, expected);
        let (again, changes) = wrap(&w, "/usr/bin/rpctap").unwrap();
        assert_eq!(again, w, "wrapping twice changes nothing");
        assert_eq!(changes[0], Change::Unchanged("fs".into()));
        assert!(has_wrapped(&w).unwrap() && !has_wrapped(VSCODE).unwrap());
        assert_eq!(wrapped_with(&w).as_deref(), Some("/usr/bin/rpctap"));
        let (u, changes) = unwrap(&w).unwrap();
        assert_eq!(changes[0], Change::Unwrapped("fs".into()));
        assert_eq!(u, VSCODE, "entry by entry, the same text");
    }

    #[test]
    fn an_entry_without_args_gets_them_and_loses_them_again() {
        let text = "{\n  \"mcpServers\": {\n    \"time\": {\n      \"command\": \"mcp-server-time\"\n    }\n  }\n}\n";
        let (w, _) = wrap(text, "rpctap").unwrap();
        assert_eq!(
            value(&w)["mcpServers"]["time"]["args"],
            serde_json::json!(["stdio", "--label", "time", "--", "mcp-server-time"])
        );
        assert_eq!(unwrap(&w).unwrap().0, text);
    }

    #[test]
    fn not_a_config_is_said() {
        assert!(matches!(
            wrap("{\"a\":1}", "r"),
            Err(ClientError::NoServers)
        ));
        assert!(matches!(wrap("nope", "r"), Err(ClientError::Json(_))));
        // Looser than a client reads (JSON5): refused.
        assert!(matches!(
            wrap("{servers: {}}", "r"),
            Err(ClientError::Json(_))
        ));
        assert!(diff("a\nb\n", "a\nc\n").contains("- b\n+ c\n"));
    }
}
