//! A test run's reports: text for a person, JSON for a program, JUnit XML for CI (one test case
//! per suite case, named as in the suite, so the names are the same in every run).

use super::run::{CaseResult, Report, Reported};
use std::fmt::Write as _;
use std::time::Duration;

fn finding_line(f: &Reported) -> String {
    let tag = if f.expected {
        " (about the request rpctap sent)"
    } else if f.allowed {
        " (allowed)"
    } else if f.failing {
        ""
    } else {
        " (not failing)"
    };
    format!(
        "{} {:?} {} at {}{tag}",
        f.code, f.severity, f.message, f.path
    )
}

fn failures(c: &CaseResult) -> Vec<String> {
    let mut out: Vec<String> = c
        .checks
        .iter()
        .filter(|k| !k.pass)
        .map(|k| format!("{}: {}", k.assertion, k.detail))
        .collect();
    out.extend(
        c.findings
            .iter()
            .filter(|f| f.failing)
            .map(|f| format!("protocol: {}", finding_line(f))),
    );
    out
}

/// The text report.
pub fn text(r: &Report) -> String {
    let mut s = String::new();
    for c in &r.cases {
        if let Some(why) = &c.skipped {
            let _ = writeln!(s, "skip {}  ({why})", c.name);
            continue;
        }
        let mark = if c.pass { "ok  " } else { "FAIL" };
        let _ = writeln!(
            s,
            "{mark} {:<52} {} ({:.1} ms)",
            c.name,
            c.verdict.as_deref().unwrap_or(""),
            c.latency_ms
        );
        for k in &c.checks {
            if !k.pass {
                let _ = writeln!(s, "       ✗ {}: {}", k.assertion, k.detail);
            }
        }
        for f in &c.findings {
            let _ = writeln!(
                s,
                "       {} {}",
                if f.failing { "✗" } else { "·" },
                finding_line(f)
            );
        }
        if let (false, Some(reply)) = (c.pass, &c.reply) {
            let _ = writeln!(s, "       reply: {reply}");
        }
    }
    for f in &r.findings {
        let _ = writeln!(
            s,
            "{} session: {}",
            if f.failing { "FAIL" } else { "note" },
            finding_line(f)
        );
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    let _ = writeln!(
        s,
        "{} passed, {} failed, {} skipped against {}",
        r.passed, r.failed, r.skipped, r.target
    );
    s
}

/// The JSON report.
pub fn json(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_default()
}

/// JUnit XML.
pub fn junit(r: &Report) -> String {
    use quick_junit::{NonSuccessKind, Report as JReport, TestCase, TestCaseStatus, TestSuite};
    let mut suite = TestSuite::new(format!("rpctap test against {}", r.target));
    for c in &r.cases {
        let status = if c.skipped.is_some() {
            TestCaseStatus::skipped()
        } else if c.pass {
            TestCaseStatus::success()
        } else {
            let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
            let f = failures(c);
            st.set_message(f.first().cloned().unwrap_or_default());
            st.set_type(c.verdict.clone().unwrap_or_default());
            st.set_description(f.join("\n"));
            st
        };
        let mut tc = TestCase::new(c.name.clone(), status);
        tc.set_classname(format!("{:?}", c.kind).to_lowercase());
        tc.set_time(Duration::from_secs_f64(c.latency_ms / 1e3));
        suite.add_test_case(tc);
    }
    if r.findings.iter().any(|f| f.failing) {
        let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
        let lines: Vec<String> = r
            .findings
            .iter()
            .filter(|f| f.failing)
            .map(finding_line)
            .collect();
        st.set_message(lines[0].clone());
        st.set_description(lines.join("\n"));
        suite.add_test_case(TestCase::new("session", st));
    }
    let mut j = JReport::new("rpctap");
    j.add_test_suite(suite);
    j.to_string().unwrap_or_default()
}
