//! The desktop loop: a client's config wrapped by `rpctap config wrap`, its stdio servers run by
//! a real MCP client (the Python SDK's) through zero-flag shims, every session recorded into the
//! state directory and listed by `rpctap sessions`, `rpctap watch` in a real terminal showing
//! them live and then from disk, secrets kept out of every file, log and feed line, and `unwrap`
//! giving the config back byte for byte.

use crate::common::*;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn py1() -> PathBuf {
    installed("mcp1", &["mcp<2", "json-rpc", "werkzeug"]).join("bin/python")
}

fn py2() -> PathBuf {
    installed("mcp2", &["mcp>=2,<3"]).join("bin/python")
}

fn everything() -> String {
    installed("node", NODE_PACKAGES)
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
        .display()
        .to_string()
}

/// `rpctap` with `home` as its whole environment's idea of home: no RPCTAP_HOME, no XDG
/// directories — as a desktop client starts it.
fn at_home(home: &Path) -> Command {
    let mut c = rpctap();
    c.env("HOME", home)
        .env_remove("RPCTAP_HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_RUNTIME_DIR");
    c
}

fn sessions_json(home: &Path) -> Vec<serde_json::Value> {
    let out = at_home(home).args(["sessions", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap()
}

fn state(home: &Path) -> PathBuf {
    home.join(".local/state/rpctap")
}

#[test]
fn three_wrapped_servers_run_twice_by_the_python_sdk_client_and_every_session_is_listed() {
    let home = Scratch::new("hub-desktop");
    // A Claude Desktop config as users write it: three stdio servers and a remote one.
    let config = home.join("claude_desktop_config.json");
    let original = format!(
        r#"{{
  "mcpServers": {{
    "py2": {{ "command": "{}", "args": ["{}", "stdio"] }},
    "py1": {{ "command": "{}", "args": ["{}", "stdio"], "env": {{ "LOG": "1" }} }},
    "everything": {{ "command": "node", "args": ["{}", "stdio"] }},
    "remote": {{ "url": "https://example.com/mcp" }}
  }}
}}
"#,
        py2().display(),
        script("mcp2_server.py"),
        py1().display(),
        script("mcp1_server.py"),
        everything()
    );
    std::fs::write(&config, &original).unwrap();
    let out = at_home(&home)
        .args(["config", "wrap"])
        .arg(&config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("wraps py2, py1, everything"), "{said}");
    assert!(
        said.contains("left alone (URL servers, not stdio): remote"),
        "{said}"
    );
    let wrapped: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(
        wrapped["mcpServers"]["py1"]["args"].as_array().unwrap()[..4],
        [
            serde_json::json!("stdio"),
            "--label".into(),
            "py1".into(),
            "--".into()
        ]
    );
    assert_eq!(
        wrapped["mcpServers"]["py1"]["env"]["LOG"], "1",
        "the rest stays"
    );

    // The client spawns the wrapped command lines as written, three at once, twice; the second
    // time its sessions stay open until the listing has shown them live beside the first three.
    let hold = home.join("hold");
    for round in 0..2 {
        let mut client = Command::new(py1());
        client
            .arg(script("mcp_multi_client.py"))
            .arg(&config)
            .env("HOME", &*home)
            .env_remove("RPCTAP_HOME")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if round == 1 {
            client.arg(&hold);
        }
        let client = client.spawn().unwrap();
        if round == 1 {
            let mut list = vec![];
            let shown = eventually(Duration::from_secs(20), || {
                list = sessions_json(&home);
                let live = list
                    .iter()
                    .filter(|s| s["live"] == true && s["calls"].as_u64() >= Some(4))
                    .count();
                list.len() == 6 && live == 3
            });
            assert!(shown, "six sessions, three of them live: {list:#?}");
            for s in list.iter().filter(|s| s["live"] == false) {
                assert!(s["calls"].as_u64().unwrap() >= 4, "{s}");
            }
            std::fs::write(&hold, "").unwrap();
        }
        let out = client.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let names: Vec<&str> = seen
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["everything", "py1", "py2"], "round {round}: {seen}");
        for s in seen.as_array().unwrap() {
            let call = s["call"][0].as_str().unwrap_or("");
            assert!(call == "5" || call == "Echo: hi", "round {round}: {s}");
        }
    }
    let list = sessions_json(&home);
    assert_eq!(list.len(), 6, "{list:#?}");
    let mut labels: Vec<&str> = list.iter().map(|s| s["label"].as_str().unwrap()).collect();
    labels.sort();
    assert_eq!(
        labels,
        ["everything", "everything", "py1", "py1", "py2", "py2"]
    );
    for s in &list {
        assert_eq!(s["live"], false, "{s}");
        assert!(
            s["calls"].as_u64().unwrap() >= 4,
            "initialize, tools/list, a call, ping: {s}"
        );
        let name = s["name"].as_str().unwrap();
        let file = PathBuf::from(s["recording"].as_str().unwrap());
        assert_eq!(file, state(&home).join(format!("sessions/{name}.jsonl")));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", file.display());
        }
    }
    // The server's stderr is in its session (and was passed on unchanged).
    let every = list.iter().find(|s| s["label"] == "everything").unwrap();
    let rec =
        rpctap::record::reader::read(Path::new(every["recording"].as_str().unwrap())).unwrap();
    assert!(
        rec.events
            .iter()
            .any(|e| matches!(e, rpctap::events::Event::Stderr(s) if s.line.contains("STDIO"))),
        "server-everything says which transport it starts on stderr"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for d in ["sessions", "run"] {
            let mode = std::fs::metadata(state(&home).join(d))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{d}");
        }
    }
    // Nothing left registered, no socket left behind.
    assert_eq!(
        std::fs::read_dir(state(&home).join("run")).unwrap().count(),
        0
    );

    // `open` finds a session by its label (the newest) and by a unique prefix.
    let newest = list
        .iter()
        .filter(|s| s["label"] == "py1")
        .map(|s| s["name"].as_str().unwrap())
        .max()
        .unwrap();
    let hub =
        rpctap::hub::Home::resolve(|k| (k == "HOME").then(|| home.as_os_str().to_owned())).unwrap();
    assert_eq!(
        hub.find("py1").unwrap(),
        state(&home).join(format!("sessions/{newest}.jsonl"))
    );
    assert!(hub.find(&newest[..newest.len() - 2]).is_ok());
    assert!(hub
        .find("nothing-like-it")
        .unwrap_err()
        .to_string()
        .contains("rpctap sessions"));

    // `unwrap` restores the file byte for byte.
    let out = at_home(&home)
        .args(["config", "unwrap"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), original);
    assert!(!rpctap::hub::clients::backup_path(&config).exists());
}

/// One sample config per client, as each writes it.
fn samples(dir: &Path) -> Vec<(PathBuf, &'static str, String)> {
    let claude_desktop = r#"{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"]
    },
    "weather": { "command": "uv", "args": ["--directory", "/srv/weather", "run", "weather.py"], "env": { "API": "x" } }
  },
  "globalShortcut": "Ctrl+Space"
}
"#;
    let claude_code = r#"{
    "mcpServers": {
        "git": {"type": "stdio", "command": "uvx", "args": ["mcp-server-git"], "env": {}},
        "docs": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
    }
}"#;
    let cursor = "{\n\t\"mcpServers\": {\n\t\t\"github\": {\"command\": \"docker\", \"args\": [\"run\", \"-i\", \"--rm\", \"ghcr.io/github/github-mcp-server\"]},\n\t\t\"linear\": {\"url\": \"https://mcp.linear.app/sse\"}\n\t}\n}\n";
    let vscode = r#"{
  // Workspace MCP servers
  "inputs": [{ "type": "promptString", "id": "key", "description": "API key", "password": true }],
  "servers": {
    "memory": { "type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], },
    "remote": { "type": "sse", "url": "http://localhost:3000/sse" }, // not ours
  }
}
"#;
    let mut out = vec![];
    for (rel, client, text) in [
        (
            "desktop/claude_desktop_config.json",
            "claude-desktop",
            claude_desktop,
        ),
        ("project/.mcp.json", "claude-code", claude_code),
        ("cursor/mcp.json", "cursor", cursor),
        ("project/.vscode/mcp.json", "vscode", vscode),
    ] {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        out.push((p, client, text.to_string()));
    }
    out
}

#[test]
fn config_wrap_and_unwrap_for_each_client_are_idempotent_and_byte_exact() {
    let dir = Scratch::new("hub-wrap");
    let bin = env!("CARGO_BIN_EXE_rpctap");
    for (file, client, original) in samples(&dir) {
        // A dry run prints the change and writes nothing.
        let out = at_home(&dir)
            .args(["config", "wrap", "--dry-run"])
            .arg(&file)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{client}: {said}");
        assert!(
            said.contains("+ ") && said.contains("dry run, nothing written"),
            "{client}: {said}"
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            original,
            "{client}"
        );

        let out = at_home(&dir)
            .args(["config", "wrap"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{client}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let said = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            said.contains("left alone (URL servers, not stdio)"),
            original.contains("\"url\""),
            "{client}: {said}"
        );
        let v = jsonc(&std::fs::read_to_string(&file).unwrap());
        let servers = v
            .get("mcpServers")
            .or(v.get("servers"))
            .unwrap()
            .as_object()
            .unwrap();
        let mut wrapped = 0;
        for (name, e) in servers {
            if e.get("url").is_some() {
                assert!(e.get("command").is_none(), "{client}: {name} left alone");
                continue;
            }
            wrapped += 1;
            assert_eq!(e["command"], bin, "{client}: {name}");
            let args: Vec<&str> = e["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            assert_eq!(
                args[..4],
                ["stdio", "--label", name.as_str(), "--"],
                "{client}: {name}"
            );
        }
        assert!(wrapped >= 1, "{client}");
        // Again: nothing changes.
        let before = std::fs::read_to_string(&file).unwrap();
        let out = at_home(&dir)
            .args(["config", "wrap"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("nothing to change"),
            "{client}"
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            before,
            "{client}: idempotent"
        );

        let out = at_home(&dir)
            .args(["config", "unwrap"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{client}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            original,
            "{client}: byte for byte"
        );
    }
    // Without FILE, `--client` finds the client's file where it keeps it (here: the project's).
    let out = at_home(&dir)
        .current_dir(dir.join("project"))
        .args(["config", "wrap", "--client", "claude-code"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(".mcp.json: wraps git"));
    let out = at_home(&dir)
        .current_dir(&*dir)
        .args(["config", "wrap", "--client", "vscode"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no client config found (looked in:"));
}

/// A config with comments and trailing commas, as a JSON value.
fn jsonc(text: &str) -> serde_json::Value {
    jsonc_parser::cst::CstRootNode::parse(text, &Default::default())
        .unwrap()
        .value()
        .unwrap()
        .to_serde_value()
        .unwrap()
}

/// Runs `rpctap config ARGS` at `home` (in `cwd`); its stdout, after checking it exited 0.
fn config_cmd(home: &Path, cwd: &Path, args: &[&str]) -> String {
    let out = at_home(home)
        .current_dir(cwd)
        .arg("config")
        .args(args)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said
}

/// Files whose name starts with `file`'s beside it (its backups).
fn beside(file: &Path) -> Vec<String> {
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let mut v: Vec<String> = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&name) && *n != name)
        .collect();
    v.sort();
    v
}

/// `unwrap` changes only what `wrap` did: a hand-edited file it never wrapped is left alone
/// ("nothing to unwrap", byte for byte, no backup), `wrap` keeps the comments, an unwrap after
/// the user edited the wrapped file undoes the entries in place with the comments kept and the
/// file as it was set aside, a second unwrap does nothing, and so does a bare `config unwrap`
/// over every client config it finds.
#[test]
fn unwrap_touches_only_what_wrap_did_and_keeps_comments() {
    let home = Scratch::new("hub-unwrap");
    let project = home.join("project");
    let cursor = project.join(".cursor/mcp.json");
    let vscode = project.join(".vscode/mcp.json");
    let hand_edited = r#"{
  // My servers. Keep "github" first.
  "mcpServers": {
    /* the filesystem one, for ~/notes */
    "notes": {
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-filesystem",
        "/home/me/notes", // trailing comma next
      ],
    },
    "time": { "command": "uvx", "args": ["mcp-server-time"] }, // UTC
  },
}
"#;
    let vscode_text = "{\n\t// workspace servers\n\t\"servers\": {\n\t\t\"memory\": { \"type\": \"stdio\", \"command\": \"npx\", \"args\": [\"-y\", \"@modelcontextprotocol/server-memory\"], },\n\t},\n}\n";
    for (f, t) in [(&cursor, hand_edited), (&vscode, vscode_text)] {
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, t).unwrap();
    }
    let file = cursor.to_str().unwrap();

    // Never wrapped: nothing to unwrap, nothing written.
    let said = config_cmd(&home, &project, &["unwrap", file]);
    assert!(said.contains("nothing to unwrap"), "{said}");
    assert_eq!(std::fs::read_to_string(&cursor).unwrap(), hand_edited);
    assert!(beside(&cursor).is_empty(), "{:?}", beside(&cursor));

    // Wrapped: the comments and the layout stay, the entries run through rpctap.
    config_cmd(&home, &project, &["wrap", file]);
    let wrapped = std::fs::read_to_string(&cursor).unwrap();
    for kept in [
        "// My servers. Keep \"github\" first.",
        "/* the filesystem one, for ~/notes */",
        "\"/home/me/notes\", // trailing comma next",
        "// UTC",
    ] {
        assert!(wrapped.contains(kept), "{kept}: {wrapped}");
    }
    let v = jsonc(&wrapped);
    assert_eq!(
        v["mcpServers"]["time"]["args"],
        serde_json::json!(["stdio", "--label", "time", "--", "uvx", "mcp-server-time"])
    );
    assert_eq!(
        std::fs::read_to_string(clients_backup(&cursor)).unwrap(),
        hand_edited
    );

    // The user edits a comment: unwrap undoes the entries in place, keeps the new comment and
    // sets the file as it was aside.
    let edited = wrapped.replace("Keep \"github\" first.", "Keep \"github\" first!");
    std::fs::write(&cursor, &edited).unwrap();
    let said = config_cmd(&home, &project, &["unwrap", file]);
    assert!(
        said.contains("unwrapped entry by entry, comments and layout kept"),
        "{said}"
    );
    let after = std::fs::read_to_string(&cursor).unwrap();
    assert_eq!(
        after,
        hand_edited.replace("first.", "first!"),
        "only the entries changed"
    );
    assert_eq!(
        std::fs::read_to_string(format!("{file}.rpctap-unwrap.bak")).unwrap(),
        edited
    );

    // Again: nothing to unwrap, nothing written.
    let said = config_cmd(&home, &project, &["unwrap", file]);
    assert!(said.contains("nothing to unwrap"), "{said}");
    assert_eq!(std::fs::read_to_string(&cursor).unwrap(), after);

    // A bare `config unwrap` finds both configs and leaves both alone.
    std::fs::write(&cursor, hand_edited).unwrap();
    let said = config_cmd(&home, &project, &["unwrap"]);
    assert_eq!(said.matches("nothing to unwrap").count(), 2, "{said}");
    assert_eq!(std::fs::read_to_string(&cursor).unwrap(), hand_edited);
    assert_eq!(std::fs::read_to_string(&vscode).unwrap(), vscode_text);

    // Where no config exists (home and project the same folder), each place is named once.
    let empty = Scratch::new("hub-unwrap-none");
    let out = at_home(&empty)
        .current_dir(&*empty)
        .args(["config", "unwrap"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let cursor_home = empty.join(".cursor/mcp.json").display().to_string();
    assert_eq!(err.matches(&cursor_home).count(), 1, "{err}");
}

fn clients_backup(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_os_string();
    s.push(".rpctap.bak");
    PathBuf::from(s)
}

/// A raw MCP session over a shim's stdin/stdout: `lines` sent one by one, each call's reply read.
fn converse(child: &mut std::process::Child, lines: &[&str]) -> Vec<String> {
    let mut stdin = child.stdin.take().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut replies = vec![];
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
        stdin.flush().unwrap();
        if l.contains("\"id\"") {
            let mut r = String::new();
            out.read_line(&mut r).unwrap();
            replies.push(r);
        }
    }
    child.stdin = Some(stdin);
    child.stdout = Some(out.into_inner());
    replies
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// Reads the feed of a unix socket for `d` (its backlog and what comes meanwhile).
fn read_feed(socket: &Path, d: Duration) -> String {
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(d)).unwrap();
    write!(s, "GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut buf = vec![];
    let t0 = Instant::now();
    let mut chunk = [0u8; 8192];
    while t0.elapsed() < d {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[test]
fn secrets_reach_no_session_file_log_or_feed_line() {
    let home = Scratch::new("hub-secrets");
    let log = home.join("shim.log");
    let mut shim = at_home(&home)
        .args(["stdio", "--log", "json", "--log-file"])
        .arg(&log)
        .arg("--")
        .arg(py1())
        .args([
            &script("mcp1_server.py"),
            "stdio",
            "--api-key=sk-test-123",
            "--token",
            "tok-abc-777",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let replies = converse(
        &mut shim,
        &[
            INIT,
            INITIALIZED,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2,"apiKey":"sk-test-123"},"_meta":{"apiKey":"sk-test-123","authorization":"Bearer tok-abc-777"}}}"#,
        ],
    );
    assert!(replies[1].contains("\"3\""), "{replies:?}");
    // The feed, while the session is live.
    let regs = rpctap::hub::Home::resolve(|k| (k == "HOME").then(|| home.as_os_str().to_owned()))
        .unwrap()
        .live();
    assert_eq!(regs.len(), 1, "{regs:?}");
    let feed = read_feed(
        Path::new(regs[0].feed.strip_prefix("unix:").unwrap()),
        Duration::from_millis(800),
    );
    assert!(feed.contains("tools/call"), "{feed}");
    drop(shim.stdin.take());
    assert!(shim.wait().unwrap().success());

    // A proxy joined to the same hub, called with an Authorization header and an API key.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (up, _stop) = rt.block_on(start_demo());
    let mut proxy = at_home(&home);
    proxy
        .args([
            "proxy",
            "--hub",
            "--label",
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--no-tui",
            "--log",
            "off",
        ])
        .arg("--upstream")
        .arg(format!("http://{up}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let (mut proxy, addrs, _err) = spawn_with_banner(&mut proxy, &["proxy on http://"]);
    rt.block_on(async {
        let req = http::Request::post(format!("http://{}/jsonrpc", addrs[0]))
            .header("content-type", "application/json")
            .header("authorization", "Bearer tok-abc-777")
            .header("x-api-key", "sk-test-123")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                r#"{"jsonrpc":"2.0","method":"echo","params":{"apiKey":"sk-test-123","x":1},"id":1}"#,
            )))
            .unwrap();
        let r = client().request(req).await.unwrap();
        assert_eq!(r.status(), 200);
    });
    proxy.term();

    let list = sessions_json(&home);
    assert_eq!(list.len(), 2, "{list:#?}");
    assert!(list
        .iter()
        .any(|s| s["label"] == "demo" && s["mode"] == "proxy"));
    let mut everything = feed;
    everything.push_str(&std::fs::read_to_string(&log).unwrap());
    for s in &list {
        let text = std::fs::read_to_string(s["recording"].as_str().unwrap()).unwrap();
        assert!(text.contains("\"event\":\"call\""), "{text}");
        everything.push_str(&text);
    }
    everything.push_str(&String::from_utf8_lossy(
        &at_home(&home)
            .args(["sessions", "--json"])
            .output()
            .unwrap()
            .stdout,
    ));
    for secret in ["sk-test-123", "tok-abc-777"] {
        assert!(
            !everything.contains(secret),
            "{secret} leaked:\n{everything}"
        );
    }
    assert!(
        everything.contains("--api-key=[REDACTED]"),
        "the command is kept, scrubbed"
    );
}

/// A tmux server whose shell has `home` as HOME and no hub variables (as a desktop user's).
pub(crate) fn tmux_at_home(home: &Path) -> Tmux {
    let home = format!("HOME={}", home.display());
    Tmux::shell(
        "hub",
        160,
        40,
        &[
            "-u",
            "RPCTAP_HOME",
            "-u",
            "XDG_RUNTIME_DIR",
            "-u",
            "XDG_STATE_HOME",
            &home,
        ],
    )
}

fn shim(home: &Path, label: &str) -> Proc {
    let mut c = at_home(home);
    c.args(["stdio", "--label", label, "--"])
        .arg(py1())
        .args([&script("mcp1_server.py"), "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    Proc::spawn(&mut c)
}

#[test]
fn watch_shows_shims_live_marks_a_killed_one_ended_within_2s_and_backfills_them_later() {
    let home = Scratch::new("hub-watch");
    let t = tmux_at_home(&home);
    let bin = env!("CARGO_BIN_EXE_rpctap");
    // Started before any shim: it waits for them.
    t.cmd(&["send-keys", "-t", "t", &format!("{bin} watch"), "Enter"]);
    t.wait_for("Stderr", Duration::from_secs(10));

    let mut alpha = shim(&home, "alpha");
    let mut beta = shim(&home, "beta");
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add","arguments":{"a":20,"b":22}}}"#;
    for p in [&mut alpha, &mut beta] {
        let r = converse(&mut p.0, &[INIT, INITIALIZED, call]);
        assert!(r[1].contains("42"), "{r:?}");
    }
    // Both appear in the servers' list, live, with their calls.
    let screen = t.wait_until(Duration::from_secs(5), |s| {
        ["alpha", "beta"]
            .iter()
            .all(|l| line_with(s, l).contains("live") && line_with(s, l).contains(" 2 "))
    });
    for l in ["alpha", "beta"] {
        let row = line_with(&screen, l);
        assert!(
            row.contains("live") && row.contains(" 2 "),
            "{l}:\n{screen}"
        );
    }

    // beta killed with -9: ended within two seconds.
    let killed = Instant::now();
    signal(beta.id(), "KILL");
    let _ = beta.0.wait();
    let screen = t.wait_until(Duration::from_secs(3), |s| {
        line_with(s, "beta").contains("ended")
    });
    assert!(line_with(&screen, "beta").contains("ended"), "{screen}");
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "took {:?}",
        killed.elapsed()
    );
    assert!(line_with(&screen, "alpha").contains("live"), "{screen}");

    // Enter on a server: its calls, and only its.
    t.cmd(&["send-keys", "-t", "t", "g", "Enter"]);
    let screen = t.wait_for("server:alpha", Duration::from_secs(3));
    assert!(screen.contains("tools/call add"), "{screen}");
    assert!(
        !screen
            .lines()
            .any(|l| l.contains("beta") && l.contains("tools/call")),
        "{screen}"
    );

    // alpha ends normally; watch quits; a new watch shows both from disk.
    drop(alpha.0.stdin.take());
    assert!(alpha.0.wait().unwrap().success());
    t.cmd(&["send-keys", "-t", "t", "q"]);
    t.wait_for("READY$", Duration::from_secs(5));
    t.cmd(&["send-keys", "-t", "t", &format!("{bin} watch"), "Enter"]);
    // Both ended, and their calls read back from their recordings (which lands a moment after
    // the rows appear: the backfill reads the files).
    let screen = t.wait_until(Duration::from_secs(10), |s| {
        ["alpha", "beta"].iter().all(|l| {
            let row = line_with(s, l);
            row.contains("ended") && row.contains(" 2 ")
        })
    });
    for l in ["alpha", "beta"] {
        let row = line_with(&screen, l);
        assert!(
            row.contains("ended") && row.contains(" 2 "),
            "{l} backfilled:\n{screen}"
        );
    }
    // From the servers' list to the calls (two tabs), and a filter across all servers.
    t.cmd(&[
        "send-keys",
        "-t",
        "t",
        "Tab",
        "Tab",
        "/",
        "server:beta",
        "Enter",
    ]);
    let screen = t.wait_for("server:beta", Duration::from_secs(3));
    assert!(
        screen.contains("tools/call add") && screen.contains("initialize"),
        "{screen}"
    );
    t.cmd(&["send-keys", "-t", "t", "q"]);
    t.wait_for("READY$", Duration::from_secs(5));

    // Post-mortem from elsewhere: a session piped into `open -`.
    let hub =
        rpctap::hub::Home::resolve(|k| (k == "HOME").then(|| home.as_os_str().to_owned())).unwrap();
    let file = hub.find("beta").unwrap();
    t.cmd(&["send-keys", "-t", "t", "clear", "Enter"]);
    t.cmd(&[
        "send-keys",
        "-t",
        "t",
        &format!("cat {} | {bin} open -", file.display()),
        "Enter",
    ]);
    let screen = t.wait_for("tools/call add", Duration::from_secs(5));
    assert!(
        screen.contains("rpctap open -") && screen.contains("result"),
        "{screen}"
    );
    t.cmd(&["send-keys", "-t", "t", "q"]);
}

#[test]
fn a_broken_state_directory_never_stops_a_shim_and_stale_registrations_are_cleaned() {
    let home = Scratch::new("hub-broken");
    // The state directory's place is a file: the shim warns and relays.
    std::fs::create_dir_all(home.join(".local/state")).unwrap();
    std::fs::write(home.join(".local/state/rpctap"), "not a directory").unwrap();
    let mut c = at_home(&home);
    c.args(["stdio", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, r#"{{"jsonrpc":"2.0","method":"x"}}"#).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: the hub is unavailable"));

    // A home so deep that its socket's path cannot be bound (unix sockets take ~108 bytes):
    // the hub's parts are dropped, said, and the relay goes on.
    let deep = home.join("d".repeat(120));
    let mut c = rpctap();
    c.env("RPCTAP_HOME", &deep)
        .args(["stdio", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, r#"{{"jsonrpc":"2.0","method":"y"}}"#).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"jsonrpc\":\"2.0\",\"method\":\"y\"}\n"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("going on without them"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A registration whose process is gone (a shim killed with -9 before it could clean up):
    // removed by whoever looks, with its socket.
    let home = Scratch::new("hub-stale");
    let hub =
        rpctap::hub::Home::resolve(|k| (k == "HOME").then(|| home.as_os_str().to_owned())).unwrap();
    hub.create().unwrap();
    let sock = hub.socket("gone-1");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let reg = rpctap::hub::Registration {
        name: "gone-1".into(),
        label: "gone".into(),
        mode: "stdio".into(),
        command: vec!["x".into()],
        pid: 999_999,
        server_pid: None,
        started: 1,
        feed: format!("unix:{}", sock.display()),
        recording: None,
    };
    std::mem::forget(hub.register(&reg).unwrap());
    assert!(sessions_json(&home).is_empty());
    assert!(!sock.exists(), "the dead socket is cleaned");
    assert_eq!(std::fs::read_dir(&hub.runtime).unwrap().count(), 0);
}

#[test]
fn prune_deletes_only_old_ended_sessions_and_the_cap_removes_the_oldest_first() {
    let home = Scratch::new("hub-prune");
    let hub =
        rpctap::hub::Home::resolve(|k| (k == "HOME").then(|| home.as_os_str().to_owned())).unwrap();
    hub.create().unwrap();
    let header = |label: &str| {
        format!("{{\"rpctap_recording\":1,\"transport\":\"stdio\",\"label\":\"{label}\",\"command\":[\"{label}\"]}}\n")
    };
    for (name, age_days) in [("old-1", 40), ("old-2", 35), ("new-1", 1)] {
        let p = hub.recording(name);
        std::fs::write(&p, header(name) + &"x".repeat(1000)).unwrap();
        let ok = Command::new("touch")
            .args(["-d", &format!("{age_days} days ago")])
            .arg(&p)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let out = at_home(&home)
        .args(["prune", "--older-than", "30d", "--dry-run"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("would delete")
            && said.contains("old-1")
            && said.contains("old-2")
            && !said.contains("new-1"),
        "{said}"
    );
    assert_eq!(sessions_json(&home).len(), 3, "a dry run deletes nothing");
    // Without --yes and without a terminal: refused, nothing deleted.
    let out = at_home(&home)
        .args(["prune", "--older-than", "30d"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pass --yes"));
    assert_eq!(sessions_json(&home).len(), 3);
    let out = at_home(&home)
        .args(["prune", "--older-than", "30d", "--yes"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let left: Vec<String> = sessions_json(&home)
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left, ["new-1"]);
    // No default age.
    assert_eq!(
        at_home(&home).arg("prune").output().unwrap().status.code(),
        Some(2)
    );

    // The cap: a shim's start removes the oldest sessions beyond it, said once.
    for (name, age) in [("a-1", 3), ("a-2", 2)] {
        let p = hub.recording(name);
        std::fs::write(&p, header(name) + &"x".repeat(4000)).unwrap();
        Command::new("touch")
            .args(["-d", &format!("{age} days ago")])
            .arg(&p)
            .status()
            .unwrap();
    }
    let out = at_home(&home)
        .env("RPCTAP_STATE_MAX_BYTES", "6KiB")
        .args(["stdio", "--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(said.matches("passed its cap").count(), 1, "{said}");
    let mut left: Vec<String> = sessions_json(&home)
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    left.sort();
    assert!(
        !left.contains(&"a-1".to_string()),
        "the oldest went first: {left:?}"
    );
    assert!(left.contains(&"new-1".to_string()), "{left:?}");
}

/// A wrapped server that prints a banner on stdout before speaking JSON-RPC: the recording
/// keeps the banner's text (its `PARSE_ERROR` shows what came) with the secret inside it
/// redacted — not the whole line withheld (issue 62.7).
#[test]
fn a_banner_line_keeps_its_text_and_loses_its_secret() {
    let home = Scratch::new("hub-banner");
    let mut shim = at_home(&home)
        .args(["stdio", "--", "sh", "-c"])
        .arg("echo 'Starting demo v1 with api_key=sk-live-999 on stdio'; cat >/dev/null")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    drop(shim.stdin.take());
    assert!(shim.wait().unwrap().success());
    let sessions = state(&home).join("sessions");
    let file = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("a recording");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains("sk-live-999"), "{text}");
    assert!(
        text.contains("Starting demo v1 with api_key=[REDACTED] on stdio"),
        "{text}"
    );
    let out = at_home(&home).arg("check").arg(&file).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("PARSE_ERROR"), "{report}");
    assert!(!report.contains("sk-live-999"), "{report}");
}

/// The hub's folders — every one rpctap made on the way, not only the last — are the owner's
/// alone (0700), its files 0600 (issue 61).
#[test]
fn the_state_directory_and_every_folder_made_for_it_are_the_owners_alone() {
    use std::os::unix::fs::PermissionsExt;
    let home = Scratch::new("hub-private");
    let mut shim = at_home(&home)
        .args(["stdio", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    drop(shim.stdin.take());
    assert!(shim.wait().unwrap().success());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for d in [
        home.join(".local"),
        home.join(".local/state"),
        state(&home),
        state(&home).join("sessions"),
    ] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
    }
    for f in std::fs::read_dir(state(&home).join("sessions"))
        .unwrap()
        .flatten()
    {
        assert_eq!(mode(&f.path()), 0o600, "{}", f.path().display());
    }
}
