//! Desktop clients' MCP configs: where each client keeps its file, and how a stdio server
//! entry is wrapped to run through `rpctap stdio --label NAME --` and unwrapped again.
//!
//! Claude Desktop, Claude Code and Cursor list servers under `mcpServers`, VS Code under
//! `servers`; an entry with a `command` (and no `url`, and no `type` other than `stdio`) is a
//! stdio server. The file is read as JSON, or as JSON with comments and trailing commas (VS
//! Code's): the wrapped file is written as plain JSON in the original's indentation, and the
//! original is kept byte for byte beside it (`FILE.rpctap.bak`), which `unwrap` restores.

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

/// Parses a config, with comments and trailing commas allowed; `true` when it had them.
fn parse(text: &str) -> Result<(Value, bool), ClientError> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => Ok((v, false)),
        Err(first) => {
            let plain = strip_jsonc(text);
            serde_json::from_str::<Value>(&plain)
                .map(|v| (v, true))
                .map_err(|_| ClientError::Json(first.to_string()))
        }
    }
}

/// JSON with comments (`//`, `/* */`) and trailing commas, as plain JSON (strings untouched):
/// comments go first, then the commas they may have hidden.
fn strip_jsonc(text: &str) -> String {
    let plain = rewrite(text.as_bytes(), false);
    String::from_utf8_lossy(&rewrite(&plain, true)).into_owned()
}

/// One pass over `b` outside strings: drops comments, or (`commas`) trailing commas.
fn rewrite(b: &[u8], commas: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(b.len());
                out.extend_from_slice(&b[start..i]);
            }
            b'/' if !commas && b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if !commas && b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i = (i + 2).min(b.len());
            }
            b',' if commas => {
                // A comma followed only by blanks and a closing bracket goes.
                let mut j = i + 1;
                while j < b.len() && b[j].is_ascii_whitespace() {
                    j += 1;
                }
                if !matches!(b.get(j), Some(b'}') | Some(b']')) {
                    out.push(b',');
                }
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The original's indentation (its first indented line's), for the rewritten file.
fn indent_of(text: &str) -> Vec<u8> {
    text.lines()
        .skip(1)
        .find_map(|l| {
            let n = l.len() - l.trim_start().len();
            (n > 0).then(|| l.as_bytes()[..n].to_vec())
        })
        .unwrap_or_else(|| b"  ".to_vec())
}

fn write(v: &Value, like: &str) -> String {
    let indent = indent_of(like);
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(&indent);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    let _ = serde::Serialize::serialize(v, &mut ser);
    let mut s = String::from_utf8_lossy(&out).into_owned();
    if like.ends_with('\n') {
        s.push('\n');
    }
    s
}

fn servers_mut(v: &mut Value) -> Result<Vec<&mut Map<String, Value>>, ClientError> {
    let obj = v.as_object_mut().ok_or(ClientError::NoServers)?;
    let found: Vec<&mut Map<String, Value>> = obj
        .iter_mut()
        .filter(|(k, _)| KEYS.contains(&k.as_str()))
        .filter_map(|(_, s)| s.as_object_mut())
        .collect();
    if found.is_empty() {
        return Err(ClientError::NoServers);
    }
    Ok(found)
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

/// The config with each stdio server wrapped (`rpctap`: the program the entries run).
pub fn wrap(text: &str, rpctap: &str) -> Result<(String, Vec<Change>, bool), ClientError> {
    let (mut v, had_comments) = parse(text)?;
    let mut changes = Vec::new();
    for servers in servers_mut(&mut v)? {
        for (name, e) in servers.iter_mut() {
            let Some(e) = e.as_object_mut() else { continue };
            if !is_stdio(e) {
                changes.push(Change::Remote(name.clone()));
                continue;
            }
            if is_wrapped(e) {
                changes.push(Change::Unchanged(name.clone()));
                continue;
            }
            let cmd = e.get("command").cloned().unwrap_or(Value::Null);
            let mut args = vec![
                Value::from("stdio"),
                Value::from("--label"),
                Value::from(super::command::sanitize(name)),
                Value::from("--"),
                cmd,
            ];
            args.extend(args_of(e));
            e.insert("command".into(), Value::from(rpctap));
            e.insert("args".into(), Value::from(args));
            changes.push(Change::Wrapped(name.clone()));
        }
    }
    Ok((write(&v, text), changes, had_comments))
}

/// The config with each wrapped entry back to its own command (entry by entry: used when the
/// file changed since `wrap`, so its backup no longer matches).
pub fn unwrap(text: &str) -> Result<(String, Vec<Change>), ClientError> {
    let (mut v, _) = parse(text)?;
    let mut changes = Vec::new();
    for servers in servers_mut(&mut v)? {
        for (name, e) in servers.iter_mut() {
            let Some(e) = e.as_object_mut() else { continue };
            if !is_wrapped(e) {
                changes.push(Change::Unchanged(name.clone()));
                continue;
            }
            let args = args_of(e);
            let Some(sep) = args.iter().position(|a| a.as_str() == Some("--")) else {
                continue;
            };
            let Some(cmd) = args.get(sep + 1).cloned() else {
                continue;
            };
            e.insert("command".into(), cmd);
            e.insert("args".into(), Value::from(args[sep + 2..].to_vec()));
            changes.push(Change::Unwrapped(name.clone()));
        }
    }
    Ok((write(&v, text), changes))
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

    #[test]
    fn wrap_is_idempotent_leaves_remote_entries_and_unwrap_inverts_it() {
        let (w, changes, comments) = wrap(VSCODE, "/usr/bin/rpctap").unwrap();
        assert!(comments);
        assert_eq!(
            changes,
            [
                Change::Wrapped("fs".into()),
                Change::Remote("remote".into())
            ]
        );
        assert!(
            w.contains("\t\"servers\""),
            "the tab indentation is kept: {w}"
        );
        let v: Value = serde_json::from_str(&w).unwrap();
        assert_eq!(v["servers"]["fs"]["command"], "/usr/bin/rpctap");
        assert_eq!(
            v["servers"]["fs"]["args"],
            serde_json::json!([
                "stdio",
                "--label",
                "fs",
                "--",
                "npx",
                "-y",
                "@modelcontextprotocol/server-filesystem",
                "."
            ])
        );
        assert_eq!(v["servers"]["remote"]["url"], "https://example.com/mcp");
        let (again, changes, _) = wrap(&w, "/usr/bin/rpctap").unwrap();
        assert_eq!(again, w, "wrapping twice changes nothing");
        assert_eq!(changes[0], Change::Unchanged("fs".into()));
        let (u, changes) = unwrap(&w).unwrap();
        assert_eq!(changes[0], Change::Unwrapped("fs".into()));
        let u: Value = serde_json::from_str(&u).unwrap();
        let orig: Value = serde_json::from_str(&strip_jsonc(VSCODE)).unwrap();
        assert_eq!(u, orig, "entry by entry, the same config");
    }

    #[test]
    fn not_a_config_is_said() {
        assert!(matches!(
            wrap("{\"a\":1}", "r"),
            Err(ClientError::NoServers)
        ));
        assert!(matches!(wrap("nope", "r"), Err(ClientError::Json(_))));
        assert_eq!(
            strip_jsonc(r#"{"a": "// not a comment", /* c */ "b": [1,],}"#),
            r#"{"a": "// not a comment",  "b": [1]}"#
        );
        assert!(diff("a\nb\n", "a\nc\n").contains("- b\n+ c\n"));
    }
}
