//! What a session costs an agent's context: token counts held to a second implementation of the
//! same encodings (js-tiktoken, tests/interop/count_tokens.mjs) on a fixed table of texts, and
//! server-everything's tool definitions listed biggest first by `rpctap cost` with the counts
//! js-tiktoken gives them; `check --max-tokens` / `--max-definition-tokens` as gates.

use crate::common::*;
use rpctap::tokens::Tokenizer;
use serde_json::Value;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_rpctap");

/// js-tiktoken's counts of `texts` under o200k_base and cl100k_base.
fn reference(texts: &[String]) -> (Vec<usize>, Vec<usize>) {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = installed("node", NODE_PACKAGES);
    // Beside node_modules, where its import resolves (a name of its own: tests run at once).
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let script = dir.join(format!("count_tokens-{}-{n}.mjs", std::process::id()));
    std::fs::copy(root().join("tests/interop/count_tokens.mjs"), &script).unwrap();
    let mut node = Command::new(dir.join("node_modules/node/bin/node"))
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let input = serde_json::to_vec(texts).unwrap();
    let mut stdin = node.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || stdin.write_all(&input).unwrap());
    let out = node.wait_with_output().unwrap();
    feeder.join().unwrap();
    let _ = std::fs::remove_file(&script);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let nums = |k: &str| serde_json::from_value::<Vec<usize>>(v[k].clone()).unwrap();
    (nums("o200k_base"), nums("cl100k_base"))
}

/// The table: prose, code, JSON as MCP carries it, other scripts, emoji, whitespace runs, a
/// special token's spelling, numbers, a long text.
fn table() -> Vec<String> {
    let mut t: Vec<String> = [
        "hello world",
        "The quick brown fox jumps over the lazy dog.",
        "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"q":"rust"}}}"#,
        r#"{"name":"get_weather","description":"Get the weather for a city","inputSchema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}"#,
        "Grüße aus Köln — ça va? ¿Qué tal?",
        "東京の天気は晴れです。今日は良い日ですね。",
        "Привет, мир! Как дела?",
        "🦀🚀✨ emoji 👩‍👩‍👧‍👦 family",
        "    \n\n\t\t   trailing spaces   \n",
        "<|endoftext|> and <|im_start|>",
        "1234567890 3.14159 -42 1e10 0xdeadbeef",
        "",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    t.push("lorem ipsum dolor sit amet, ".repeat(400));
    t
}

#[test]
fn counts_equal_js_tiktoken_on_the_table() {
    let texts = table();
    let (o200k, cl100k) = reference(&texts);
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(
            Tokenizer::O200k.count(text).tokens,
            o200k[i],
            "o200k_base: {text:?}"
        );
        assert_eq!(
            Tokenizer::Cl100k.count(text).tokens,
            cl100k[i],
            "cl100k_base: {text:?}"
        );
    }
}

/// A session of server-everything over stdio through a recording `rpctap stdio`.
fn record_everything(file: &Path) {
    let dir = installed("node", NODE_PACKAGES);
    let mut child = Command::new(BIN)
        .args(["stdio", "--record", file.to_str().unwrap(), "--"])
        .arg(dir.join("node_modules/node/bin/node"))
        .arg(dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut call = |line: &str, id: Option<u64>| {
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        let Some(id) = id else { return };
        // Up to the reply (the server may notify first).
        for _ in 0..50 {
            let mut l = String::new();
            if stdout.read_line(&mut l).unwrap() == 0 {
                panic!("the server ended before replying to {id}");
            }
            let v: Value = serde_json::from_str(&l).unwrap();
            if v["id"] == id {
                return;
            }
        }
        panic!("no reply to {id}");
    };
    call(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        Some(1),
    );
    call(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        None,
    );
    call(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#, Some(2));
    call(
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}"#,
        Some(3),
    );
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn server_everythings_biggest_tools_are_listed_with_their_counts_and_gated() {
    let tmp = Scratch::new("cost");
    let file = tmp.join("everything.jsonl");
    record_everything(&file);
    let f = file.to_str().unwrap();
    let (code, out, err) = run(&["cost", f, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let cost: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(cost["tokenizer"], "o200k_base");
    let tools = cost["definitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "tools")
        .expect("the tools/list footprint");
    let items = tools["items"].as_array().unwrap();
    assert!(items.len() >= 5, "{tools}");
    let counts: Vec<usize> = items
        .iter()
        .map(|i| i["tokens"].as_u64().unwrap() as usize)
        .collect();
    assert!(
        counts.windows(2).all(|w| w[0] >= w[1]),
        "biggest first: {counts:?}"
    );
    assert_eq!(
        tools["total"].as_u64().unwrap() as usize,
        counts.iter().sum::<usize>()
    );
    // Each tool's count is js-tiktoken's for the tool's JSON.
    let rec = rpctap::record::reader::read(&file).unwrap();
    let list = rpctap::offline::diff::last_tool_list(&rec).unwrap();
    let names: Vec<String> = items
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect();
    let texts: Vec<String> = names.iter().map(|n| list[n].to_string()).collect();
    let (o200k, _) = reference(&texts);
    assert_eq!(counts, o200k, "{names:?}");
    eprintln!("server-everything's tool definitions, biggest first (o200k_base):");
    for (n, c) in names.iter().zip(&counts) {
        eprintln!("  {c:>6}  {n}");
    }
    // The echo call's arguments and result are counted too.
    let echo = cost["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["key"] == "tools/call echo")
        .expect("the echo call");
    assert_eq!(echo["calls"], 1);
    assert!(echo["results"]["max"].as_u64().unwrap() > 0);
    let (_, text, _) = run(&["cost", f, "--top", "3"]);
    assert!(
        text.contains(&format!("  {:>7}  {}", counts[0], names[0])),
        "{text}"
    );
    assert!(
        text.contains(&format!("… {} more", names.len() - 3)),
        "{text}"
    );

    // The gates: a definition set over its bound fails, naming the biggest.
    let gate = |extra: &[&str]| {
        run(&[
            &["check", f, "--fail-on", "none", "--format", "text"][..],
            extra,
        ]
        .concat())
    };
    let (code, text, _) = gate(&["--max-definition-tokens", "10"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("biggest: {} {}", names[0], counts[0])),
        "{text}"
    );
    let total = tools["total"].as_u64().unwrap().to_string();
    let (code, text, _) = gate(&["--max-definition-tokens", &total]);
    assert_eq!(code, 0, "{text}");
    let (code, text, _) = gate(&["--max-tokens", "1"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("tools/call echo (id 3) returned"), "{text}");
    let (code, _, err) = run(&["check", f, "--tokenizer", "gpt2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--tokenizer gpt2"), "{err}");
}
