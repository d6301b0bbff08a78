//! What a wrapped server's command line says about it: the label it is shown by (the script,
//! package or binary it runs, not the interpreter that runs it) and the same command with the
//! secrets its arguments carry scrubbed (`--token X`, `--api-key=X`, `Bearer …`), which is all
//! of it a recording, a registration or the screen ever holds.

use crate::redact::REDACTED;

/// Programs that run another program: the label is taken from what they run.
const RUNNERS: [&str; 22] = [
    "python", "python3", "py", "node", "nodejs", "npx", "npm", "pnpm", "pnpx", "yarn", "bunx",
    "bun", "deno", "uv", "uvx", "pipx", "sh", "bash", "zsh", "env", "docker", "podman",
];

/// Words a runner takes before what it runs (`uv run`, `npm exec`, `docker run`, `deno run`).
const RUNNER_WORDS: [&str; 5] = ["run", "exec", "dlx", "x", "tool"];

/// Runner flags that take a value (`uv run --with mcp x.py`, `python -m module`).
const VALUE_FLAGS: [&str; 9] = [
    "--with",
    "--from",
    "--python",
    "-p",
    "--package",
    "--directory",
    "--project",
    "-e",
    "--env",
];

/// A label from a command: `npx -y @modelcontextprotocol/server-everything` is
/// `server-everything`, `python3 /srv/weather.py` is `weather`, `uv run --with mcp x.py` is `x`,
/// `python -m mcp_server_git` is `mcp_server_git`; kept to `[A-Za-z0-9._-]`, 32 characters.
pub fn label_of(command: &[String]) -> String {
    let mut words = command.iter().map(String::as_str).peekable();
    let mut chosen = None;
    while let Some(w) = words.next() {
        let base = basename(w);
        let stem = base.trim_end_matches(".exe");
        let is_runner = RUNNERS
            .iter()
            .any(|r| stem == *r || stem.starts_with(&format!("{r}3.")) || stem == "python2");
        if is_runner && chosen.is_none() {
            // Skip the runner, its words and its flags.
            while let Some(n) = words.peek() {
                if RUNNER_WORDS.contains(n) {
                    words.next();
                } else if *n == "-m" || *n == "-c" {
                    // `python -m module`; `sh -c 'exec node srv.js'`: its first word that is
                    // not a runner.
                    words.next();
                    if let Some(m) = words.next() {
                        let inner: Vec<String> = m
                            .split_whitespace()
                            .filter(|w| *w != "exec")
                            .map(str::to_string)
                            .collect();
                        chosen = Some(match inner.len() {
                            0 | 1 => m.to_string(),
                            _ => label_of(&inner),
                        });
                    }
                    break;
                } else if n.starts_with('-') {
                    let flag = *n;
                    words.next();
                    if VALUE_FLAGS.contains(&flag) {
                        words.next();
                    }
                } else if n.contains('=') && !n.contains('/') {
                    words.next(); // `env A=B cmd`
                } else {
                    break;
                }
            }
            continue;
        }
        if chosen.is_none() {
            chosen = Some(w.to_string());
        }
        break;
    }
    let raw = chosen.unwrap_or_else(|| "server".into());
    let mut name = basename(&raw).to_string();
    // `@scope/pkg@1.2.3` → `pkg`; `pkg@latest` → `pkg`.
    if let Some((n, _)) = name.rsplit_once('@').filter(|(n, _)| !n.is_empty()) {
        name = n.to_string();
    }
    for ext in [".py", ".js", ".mjs", ".cjs", ".ts", ".exe", ".sh", ".jar"] {
        if let Some(s) = name.strip_suffix(ext) {
            name = s.to_string();
            break;
        }
    }
    // `index.js`, `main.py`, `server.py` in a folder: the folder names the server.
    if matches!(name.as_str(), "index" | "main" | "__main__" | "cli") {
        if let Some(parent) = parent_name(&raw) {
            name = parent;
        }
    }
    sanitize(&name)
}

/// Keeps a label to what a file name can hold: `[A-Za-z0-9._-]`, at most 32 characters.
pub fn sanitize(s: &str) -> String {
    let clean: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(32)
        .collect();
    let clean = clean.trim_matches(|c| c == '-' || c == '.').to_string();
    if clean.is_empty() {
        "server".into()
    } else {
        clean
    }
}

fn basename(p: &str) -> &str {
    p.rsplit(['/', '\\']).next().unwrap_or(p)
}

fn parent_name(p: &str) -> Option<String> {
    let mut parts = p.rsplit(['/', '\\']).skip(1);
    let parent = parts.next()?;
    // `build/index.js` and `dist/index.js` name their project, one level up.
    let parent = if matches!(parent, "build" | "dist" | "src" | "lib" | "bin" | "out") {
        parts.next().unwrap_or(parent)
    } else {
        parent
    };
    (!parent.is_empty() && parent != ".").then(|| parent.to_string())
}

/// Whether a flag or variable name says its value is a secret.
fn names_a_secret(name: &str) -> bool {
    let n: String = name
        .trim_start_matches('-')
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    [
        "token",
        "apikey",
        "secret",
        "password",
        "passwd",
        "auth",
        "credential",
        "bearer",
        "privatekey",
        "accesskey",
        "cookie",
    ]
    .iter()
    .any(|w| n.contains(w))
        || n == "key"
        || n.ends_with("key") && n.len() <= 8
}

/// Values that are secrets by their shape, whatever names them.
fn looks_like_a_key(v: &str) -> bool {
    const PREFIXES: [&str; 9] = [
        "sk-",
        "sk_",
        "ghp_",
        "gho_",
        "github_pat_",
        "xoxb-",
        "xoxp-",
        "AKIA",
        "glpat-",
    ];
    v.len() >= 12 && PREFIXES.iter().any(|p| v.starts_with(p))
}

/// The command with every secret its arguments carry replaced by `[REDACTED]`, and the secret
/// values found (to be scrubbed from what else the server says, such as its stderr).
pub fn scrub(command: &[String]) -> (Vec<String>, Vec<String>) {
    let mut out = Vec::with_capacity(command.len());
    let mut secrets = Vec::new();
    let mut next_is_secret = false;
    for a in command {
        if next_is_secret {
            next_is_secret = false;
            if !a.starts_with('-') || a.len() == 1 {
                secrets.push(a.clone());
                out.push(REDACTED.to_string());
                continue;
            }
        }
        // A token after its scheme: `Bearer`, or `DPoP` (RFC 9449, a proof-bound token).
        let scheme = ["Bearer", "DPoP"].into_iter().find_map(|sch| {
            let head = a.get(..sch.len() + 1)?;
            (head[..sch.len()].eq_ignore_ascii_case(sch) && head.ends_with(' '))
                .then(|| (sch, &a[sch.len() + 1..]))
        });
        if let Some((sch, rest)) = scheme {
            secrets.push(rest.to_string());
            out.push(format!("{sch} {REDACTED}"));
            continue;
        }
        if let Some((name, value)) = a.split_once('=') {
            if !value.is_empty() && (names_a_secret(name) || looks_like_a_key(value)) {
                secrets.push(value.to_string());
                out.push(format!("{name}={REDACTED}"));
                continue;
            }
        }
        if a.starts_with('-') && !a.contains('=') && names_a_secret(a) {
            next_is_secret = true;
            out.push(a.clone());
            continue;
        }
        if looks_like_a_key(a) {
            secrets.push(a.clone());
            out.push(REDACTED.to_string());
            continue;
        }
        out.push(a.clone());
    }
    secrets.retain(|s| s.len() >= 4);
    (out, secrets)
}

pub use crate::redact::scrub_text;

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn labels_name_what_runs_not_what_runs_it() {
        for (cmd, label) in [
            (
                "npx -y @modelcontextprotocol/server-everything",
                "server-everything",
            ),
            (
                "npx -y @modelcontextprotocol/server-everything@2025.1.1 stdio",
                "server-everything",
            ),
            ("python3 /srv/weather.py", "weather"),
            (
                "/usr/bin/python3.12 -u tests/interop/mcp2_server.py",
                "mcp2_server",
            ),
            ("uv run --with mcp x.py", "x"),
            ("uvx mcp-server-fetch", "mcp-server-fetch"),
            ("python -m mcp_server_git --repository .", "mcp_server_git"),
            ("node /home/u/my-server/build/index.js", "my-server"),
            ("/opt/bin/github-mcp-server stdio", "github-mcp-server"),
            (
                "docker run -i --rm ghcr.io/github/github-mcp-server",
                "github-mcp-server",
            ),
            ("env A=1 B=2 node srv.mjs", "srv"),
            ("bash", "server"),
        ] {
            assert_eq!(label_of(&c(cmd)), label, "{cmd}");
        }
        let sh = [
            "sh".to_string(),
            "-c".into(),
            "exec node /srv/weather/index.js --port 1".into(),
        ];
        assert_eq!(label_of(&sh), "weather");
        assert_eq!(sanitize("a b/c:d"), "a-b-c-d");
        assert_eq!(sanitize(&"x".repeat(50)).len(), 32);
    }

    #[test]
    fn secrets_in_arguments_are_scrubbed_and_named() {
        let (out, secrets) = scrub(&c(
            "server --api-key=sk-test-123 --token abc123 --port 8080 Bearer:no -H",
        ));
        assert_eq!(
            out,
            c("server --api-key=[REDACTED] --token [REDACTED] --port 8080 Bearer:no -H")
        );
        assert_eq!(secrets, ["sk-test-123", "abc123"]);
        let (out, secrets) = scrub(&[
            "curl".into(),
            "-H".into(),
            "Bearer eyJhbGciOi".into(),
            "GITHUB_TOKEN=ghp_abcdefghijkl".into(),
            "ghp_abcdefghijklmnop".into(),
            "--password".into(),
            "--verbose".into(),
            "dpop eyJwcm9vZg".into(),
        ]);
        assert_eq!(
            out,
            [
                "curl",
                "-H",
                "Bearer [REDACTED]",
                "GITHUB_TOKEN=[REDACTED]",
                "[REDACTED]",
                "--password",
                "--verbose",
                "DPoP [REDACTED]"
            ]
        );
        assert_eq!(secrets.len(), 4);
        assert_eq!(
            scrub_text("started with key sk-test-123", &["sk-test-123".into()]),
            "started with key [REDACTED]"
        );
    }
}
