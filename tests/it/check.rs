//! `rpctap check` on exchange documents: seed 004's example gives its result exactly; documents
//! that trigger each finding code; limits and exit codes.

use std::io::Write;
use std::process::{Command, Stdio};

fn check(input: &str, args: &[&str]) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rpctap"))
        .arg("check")
        .arg("-")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    (
        o.status.code().unwrap(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn seed_004_example_gives_its_example_result() {
    let seed_path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/seed004_example.json"
    );
    let seed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(seed_path).unwrap()).unwrap();
    let (code, out, _) = check(&seed["exampleInput"].to_string(), &[]);
    assert_eq!(code, 0);
    let got: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got, seed["exampleResponse"]["result"]);
}

fn codes(out: &str) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(out).unwrap();
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["code"].as_str().unwrap().to_string(),
                f["path"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn each_finding_code_from_a_document() {
    let m = |id: &str| format!(r#"{{"jsonrpc":"2.0","method":"m","id":{id}}}"#);
    let r = |id: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":1}}"#);
    let cases: Vec<(String, &str, &str, i32)> = vec![
        (
            format!(
                r#"{{"request":[{},{}],"response":[{},{}]}}"#,
                m("1"),
                m("1"),
                r("1"),
                r("1")
            ),
            "DUPLICATE_ID",
            "$.request[1]",
            1,
        ),
        (
            format!(
                r#"{{"request":[{}],"response":[{},{}]}}"#,
                m("1"),
                r("1"),
                r("2")
            ),
            "UNMATCHED_RESPONSE",
            "$.response[1]",
            1,
        ),
        (
            format!(r#"{{"request":[{}],"response":[{}]}}"#, m("1"), r("\"1\"")),
            "ID_TYPE_MISMATCH",
            "$.response[0]",
            1,
        ),
        (
            format!(
                r#"{{"request":[{},{}],"response":[{}]}}"#,
                m("1"),
                m("2"),
                r("1")
            ),
            "MISSING_RESPONSE",
            "$.request[1]",
            1,
        ),
        (
            format!(
                r#"{{"request":[{},{{"jsonrpc":"2.0","method":"n"}}],"response":[{},{}]}}"#,
                m("1"),
                r("1"),
                r("5")
            ),
            "NOTIFICATION_REPLY",
            "$.response[1]",
            1,
        ),
        (
            format!(r#"{{"request":[{}],"response":{}}}"#, m("1"), r("1")),
            "INVALID_BATCH_REPLY",
            "$.response",
            1,
        ),
        (
            format!(
                r#"{{"request":[{}],"response":[{{"jsonrpc":"2.0","id":1,"result":1,"error":{{"code":1,"message":"x"}}}},{}]}}"#,
                m("1"),
                r("1")
            ),
            "INVALID_ENVELOPE",
            "$.response[0]",
            1,
        ),
        (
            format!(
                r#"{{"request":[{}],"response":[{{"jsonrpc":"2.0","id":null,"error":{{"code":-32000,"message":"x"}}}},{}]}}"#,
                m("1"),
                r("1")
            ),
            "NULL_ID_RESPONSE",
            "$.response[0]",
            1,
        ),
        (
            format!(r#"{{"request":[{}],"response":[{}]}}"#, m("1.5"), r("1.5")),
            "UNSAFE_ID",
            "$.request[0]",
            1,
        ),
    ];
    for (doc, code, path, exit) in cases {
        let (c, out, err) = check(&doc, &[]);
        assert_eq!(
            codes(&out),
            vec![(code.to_string(), path.to_string())],
            "{doc}\n{err}"
        );
        assert_eq!(
            c, exit,
            "{code}: the default gate fails errors and warnings"
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["passesChecks"], exit == 0);
        assert_eq!(v["findingCount"], 1);
    }
    // An `info` finding (a tool's own isError) fails nothing; this profile's two severities
    // leave it out.
    let doc = r#"{"request":[{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"},"id":1}],"response":[{"jsonrpc":"2.0","id":1,"result":{"isError":true,"content":[]}}]}"#;
    let (c, out, _) = check(doc, &[]);
    assert_eq!(c, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["passesChecks"].clone(), v["findingCount"].clone()),
        (true.into(), 0.into())
    );
}

#[test]
fn limits_and_unusable_input_exit_2_with_a_clear_error() {
    let big = format!(
        r#"{{"request":[{}]}}"#,
        vec![r#"{"jsonrpc":"2.0","method":"m"}"#; 201].join(",")
    );
    let (c, _, err) = check(&big, &[]);
    assert_eq!(c, 2);
    assert!(
        err.contains("INPUT_LIMIT") && err.contains("--max-envelopes"),
        "{err}"
    );
    let (c, out, _) = check(&big, &["--max-envelopes", "300"]);
    assert_eq!(c, 0, "{out}");
    let (c, _, err) = check(
        &format!(r#"{{"request":{}1{}}}"#, "[".repeat(25), "]".repeat(25)),
        &[],
    );
    assert_eq!((c, err.contains("COMPLEXITY_LIMIT")), (2, true), "{err}");
    let (c, _, err) = check("not json", &[]);
    assert_eq!(c, 2, "{err}");
    let (c, _, err) = check(r#"{"response":[]}"#, &[]);
    assert_eq!(c, 2);
    assert!(err.contains("request"), "{err}");
    // JSON Lines of documents: one result per line.
    let (c, out, _) = check(
        "{\"request\":[]}\n{\"request\":{\"jsonrpc\":\"2.0\",\"method\":\"n\"}}\n",
        &[],
    );
    assert_eq!(c, 0);
    assert_eq!(out.lines().count(), 2);
}
