//! The reports of a replay: JUnit XML (one test case per call) and text.

use super::*;

/// JUnit XML: one test case per call.
pub fn junit(report: &Report) -> String {
    use quick_junit::{NonSuccessKind, Report as JReport, TestCase, TestCaseStatus, TestSuite};
    let mut suite = TestSuite::new(format!("rpctap replay against {}", report.target));
    for c in &report.calls {
        let status = if c.pass {
            TestCaseStatus::success()
        } else {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(format!("{} (recorded: {})", c.verdict, c.recorded));
            s.set_type(c.verdict.to_string());
            s.set_description(
                c.diffs
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join("\n"),
            );
            s
        };
        let mut tc = TestCase::new(c.name(), status);
        tc.set_classname(c.scope.clone());
        tc.set_time(Duration::from_secs_f64(c.latency_ms / 1e3));
        suite.add_test_case(tc);
    }
    let mut r = JReport::new("rpctap");
    r.add_test_suite(suite);
    r.to_string().unwrap_or_default()
}

/// The human-readable report.
pub fn text(report: &Report) -> String {
    let mut s = String::new();
    for c in &report.calls {
        let mark = if c.pass { "ok  " } else { "FAIL" };
        s.push_str(&format!(
            "{mark} {:<40} {} ({:.1} ms)",
            c.name(),
            c.verdict,
            c.latency_ms
        ));
        if !c.pass {
            s.push_str(&format!("  recorded: {}", c.recorded));
        }
        s.push('\n');
        for d in &c.diffs {
            s.push_str(&format!("       {d}\n"));
        }
    }
    for w in &report.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    s.push_str(&format!(
        "{} passed, {} failed ({} calls in {} exchanges against {})\n",
        report.passed,
        report.failed,
        report.calls.len(),
        report.exchanges,
        report.target
    ));
    s
}
