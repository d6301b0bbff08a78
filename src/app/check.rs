//! `rpctap check` (a recording through the inspector, as a CI gate), `rpctap diff` (two
//! recordings compared) and `rpctap baseline` (the servers' trusted tools).

use super::{write_out, AppError};
use crate::config::{self};

/// `rpctap check`: 0 when everything passes the gate, 1 when a finding fails it (by default an
/// error or a warning) or an assertion breaks.
pub fn run(args: crate::cli::CheckArgs) -> Result<i32, AppError> {
    use crate::inspect::offline::{check_document, CheckLimits};
    // The flags first, before anything is read: a bad one is named whatever the file.
    let gate = config::check_gate(&args)?;
    // A file is read once: its first line says whether it is a recording (read by the reader,
    // its rotated parts too) or exchange documents (read whole here).
    let stdin = args.file == "-";
    let mut bytes = Vec::new();
    if stdin {
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
            .map_err(|e| AppError::Io(format!("cannot read stdin: {e}")))?;
    } else {
        let f = std::fs::File::open(&args.file)
            .map_err(|e| AppError::Io(format!("cannot read {}: {e}", args.file)))?;
        std::io::BufRead::read_until(
            &mut std::io::BufReader::new(std::io::Read::take(f, 1 << 20)),
            b'\n',
            &mut bytes,
        )
        .map_err(|e| AppError::Io(format!("cannot read {}: {e}", args.file)))?;
    }
    let recording = String::from_utf8_lossy(&bytes)
        .lines()
        .next()
        .is_some_and(|l| l.contains("\"rpctap_recording\""));
    if !stdin && !recording {
        bytes = std::fs::read(&args.file)
            .map_err(|e| AppError::Io(format!("cannot read {}: {e}", args.file)))?;
    }
    let limits = CheckLimits {
        max_bytes: args.max_bytes,
        max_depth: args.max_depth,
        max_nodes: args.max_nodes,
        max_envelopes: args.max_envelopes,
        ..Default::default()
    };
    let text = String::from_utf8_lossy(&bytes);
    let report;
    if recording {
        let rec = if stdin {
            let mut rec = crate::record::reader::Capture::default();
            crate::record::reader::parse_part(&text, "stdin", &mut rec, true)
                .map_err(|why| AppError::Io(format!("stdin: {why}")))?;
            rec
        } else {
            // A file: its rotated parts too.
            crate::record::reader::read(std::path::Path::new(&args.file))?
        };
        // The recording goes back through the live inspector, scope by scope, its tool lists
        // compared with its label's baseline as it is now (never written here).
        let label = crate::offline::gate::label(&rec.header);
        let dir = args.baseline.clone().or_else(|| {
            crate::hub::Home::from_env()
                .ok()
                .map(|h| h.baselines())
                .filter(|d| crate::baseline::path(d, &label).is_file())
        });
        let baseline = match dir {
            Some(d) => Some(std::sync::Arc::new(
                crate::baseline::Live::open(&d, &label, false)
                    .map_err(|e| AppError::Io(e.to_string()))?,
            )),
            None => None,
        };
        let results = crate::inspect::recorded::check_recording_with(&rec, baseline);
        if results.is_empty() {
            return Err(AppError::Empty(format!(
                "{}: the recording holds no JSON-RPC messages",
                args.file
            )));
        }
        report = crate::offline::gate::recording(&gate, &rec, results);
        let out = match args.format {
            crate::cli::CheckFormat::Html => Some(gated_report(&args, &rec, &report)?),
            crate::cli::CheckFormat::Sarif => {
                let locate = crate::offline::sarif::recording_locator(&rec);
                Some(crate::offline::sarif::sarif(&report, &args.file, &locate))
            }
            _ => None,
        };
        if let Some(out) = out {
            write_out(args.output.as_deref(), &out)?;
            return Ok(i32::from(report.failed()));
        }
    } else {
        if args.format == crate::cli::CheckFormat::Html {
            return Err(AppError::Io(
                "--format html needs a recording (an exchange document has no report)".into(),
            ));
        }
        if !(gate.expect_tools.is_empty()
            && gate.forbid_tools.is_empty()
            && gate.max_duration.is_none()
            && gate.max_wall_duration.is_none()
            && gate.max_tokens.is_none()
            && gate.max_definition_tokens.is_none())
        {
            return Err(AppError::Io(
                "--expect-tool, --forbid-tool, --max-duration, --max-wall-duration, --max-tokens and --max-definition-tokens need a recording (an exchange document has no calls' times or sessions)".into(),
            ));
        }
        // One document, or JSON Lines of documents (each with its line, from 1).
        let docs: Vec<(u32, &str)> = if serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok()
        {
            vec![(1, text.as_ref())]
        } else {
            (1u32..)
                .zip(text.lines())
                .filter(|(_, l)| !l.trim().is_empty())
                .collect()
        };
        if docs.is_empty() {
            return Err(AppError::Empty(format!("{} is empty", args.file)));
        }
        let mut anything = false;
        let mut results = Vec::new();
        let lines: Vec<u32> = docs.iter().map(|d| d.0).collect();
        for (i, (_, d)) in docs.into_iter().enumerate() {
            let r = check_document(d.as_bytes(), &limits)?;
            anything |= r.request_count > 0 || !r.findings.is_empty();
            results.push((format!("document:{}", i + 1), r));
        }
        if !anything {
            return Err(AppError::Empty(format!(
                "{}: no request or response in it",
                args.file
            )));
        }
        report = crate::offline::gate::evaluate(&gate, "exchange".into(), results, &[]);
        if args.format == crate::cli::CheckFormat::Sarif {
            // `document:N` is the N-th document, at its line.
            let locate = |scope: &str, _: Option<&str>, _: Option<&str>| {
                let n: usize = scope.strip_prefix("document:")?.parse().ok()?;
                Some(crate::offline::sarif::Loc {
                    file: args.file.clone(),
                    line: *lines.get(n.checked_sub(1)?)?,
                    tool: None,
                })
            };
            let out = crate::offline::sarif::sarif(&report, &args.file, &locate);
            write_out(args.output.as_deref(), &out)?;
            return Ok(i32::from(report.failed()));
        }
        if args.format == crate::cli::CheckFormat::Json {
            // A document's result is printed bare, as seed 004 has it.
            let out: String = report
                .scopes
                .iter()
                .map(|s| format!("{}\n", serde_json::to_string(&s.result).unwrap_or_default()))
                .collect();
            write_out(args.output.as_deref(), &out)?;
            return Ok(i32::from(report.failed()));
        }
    }
    let out = match args.format {
        crate::cli::CheckFormat::Json => crate::offline::gate::json(&report),
        crate::cli::CheckFormat::Text => crate::offline::gate::text(&report),
        crate::cli::CheckFormat::Junit
        | crate::cli::CheckFormat::Html
        | crate::cli::CheckFormat::Sarif => crate::offline::gate::junit(&report),
    };
    write_out(args.output.as_deref(), &out)?;
    Ok(i32::from(report.failed()))
}

/// `check --format html`: the recording's report under the gate's verdict (what failed it,
/// the drift against the baseline among it), with the diff against `--diff-from` and the
/// replay's output when given — what a CI job's artifact needs to say why it failed.
fn gated_report(
    args: &crate::cli::CheckArgs,
    rec: &crate::record::reader::Capture,
    report: &crate::offline::gate::Report,
) -> Result<String, AppError> {
    let mut sections = vec![crate::record::report::Section {
        id: "gate",
        title: if report.failed() {
            "Gate: FAIL".into()
        } else {
            "Gate: pass".into()
        },
        failed: report.failed(),
        text: crate::offline::gate::text(report),
    }];
    if let Some(golden) = &args.diff_from {
        let (gn, g) = recording_named(golden)?;
        let th = crate::offline::diff::Thresholds {
            min_us: 100_000,
            ratio: 2.0,
        };
        let d = crate::offline::diff::diff(&gn, &g, &args.file, rec, th);
        sections.push(crate::record::report::Section {
            id: "diff",
            title: format!("Diff against {gn}"),
            failed: d.regressions() > 0,
            text: crate::offline::diff::text(&d),
        });
    }
    sections.push(cost_section(rec));
    if let Some(f) = &args.replay_report {
        let text = std::fs::read_to_string(f)
            .map_err(|e| AppError::Io(format!("cannot read {}: {e}", f.display())))?;
        sections.push(crate::record::report::Section {
            id: "replay",
            title: format!("Replay ({})", f.display()),
            failed: false,
            text,
        });
    }
    Ok(crate::record::report::html_with(rec, &args.file, &sections))
}

/// The HTML report's section of what the session costs an agent's context (`rpctap cost`).
pub(super) fn cost_section(rec: &crate::record::reader::Capture) -> crate::record::report::Section {
    let c = crate::offline::cost::cost(rec, crate::tokens::Tokenizer::default());
    crate::record::report::Section {
        id: "cost",
        title: format!("Context cost ({})", c.tokenizer),
        failed: false,
        text: crate::offline::cost::text(&c, 20),
    }
}

/// A recording named by its path or, in the state directory, by its session name.
fn recording_named(what: &str) -> Result<(String, crate::record::reader::Capture), AppError> {
    let path = std::path::PathBuf::from(what);
    let path = if path.is_file() {
        path
    } else {
        crate::hub::Home::from_env()
            .and_then(|h| h.find(what))
            .map_err(|e| AppError::Io(format!("{what}: not a file, and {e}")))?
    };
    let rec = crate::record::reader::read(&path)?;
    Ok((path.display().to_string(), rec))
}

/// `rpctap baseline show|accept|reset`.
pub fn baseline(args: crate::cli::BaselineArgs) -> Result<i32, AppError> {
    use crate::cli::BaselineAction;
    let dir = match args.dir {
        Some(d) => d,
        None => crate::hub::Home::from_env()
            .map_err(|e| AppError::Io(e.to_string()))?
            .baselines(),
    };
    let io = |e: crate::baseline::BaselineError| AppError::Io(e.to_string());
    match args.action {
        BaselineAction::Show { label: Some(l) } => {
            match crate::baseline::load(&dir, &l).map_err(io)? {
                Some(b) => write_out(
                    None,
                    &format!("{}\n", serde_json::to_string_pretty(&b).unwrap_or_default()),
                )?,
                None => {
                    return Err(AppError::Empty(format!(
                        "no baseline for {l} in {}",
                        dir.display()
                    )))
                }
            }
        }
        BaselineAction::Show { label: None } => {
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .map(|rd| {
                    rd.flatten()
                        .filter_map(|e| {
                            let p = e.path();
                            let b: crate::baseline::Baseline =
                                serde_json::from_slice(&std::fs::read(&p).ok()?).ok()?;
                            Some(format!("{}\t{} tools", b.label, b.tools.len()))
                        })
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            let out: String = names.iter().map(|n| format!("{n}\n")).collect();
            write_out(None, &out)?;
        }
        BaselineAction::Accept { session, label } => {
            let (name, rec) = recording_named(&session)?;
            let label = label.unwrap_or_else(|| crate::offline::gate::label(&rec.header));
            let Some(tools) = crate::offline::diff::last_tool_list(&rec) else {
                return Err(AppError::Empty(format!(
                    "{name}: no complete tools/list in it"
                )));
            };
            let n = tools.len();
            let p = crate::baseline::save(
                &dir,
                &crate::baseline::Baseline {
                    label: label.clone(),
                    accepted_ns: crate::events::now_ns(),
                    tools,
                },
            )
            .map_err(io)?;
            eprintln!(
                "rpctap baseline: {label}: {n} tools from {name} accepted ({})",
                p.display()
            );
        }
        BaselineAction::Reset { label } => {
            let had = crate::baseline::reset(&dir, &label).map_err(io)?;
            eprintln!(
                "rpctap baseline: {label}: {}",
                if had { "reset" } else { "had no baseline" }
            );
        }
    }
    Ok(0)
}

/// `rpctap diff A B`.
/// `rpctap cost`: a recorded session's tokens.
pub fn cost(args: crate::cli::CostArgs) -> Result<i32, AppError> {
    let (_, rec) = if args.file == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| AppError::Io(format!("cannot read stdin: {e}")))?;
        let mut rec = crate::record::reader::Capture::default();
        crate::record::reader::parse_part(&text, "stdin", &mut rec, true)
            .map_err(|why| AppError::Io(format!("stdin: {why}")))?;
        ("stdin".to_string(), rec)
    } else {
        recording_named(&args.file)?
    };
    let c = crate::offline::cost::cost(&rec, args.tokenizer);
    let out = match args.format {
        crate::cli::CostFormat::Text => crate::offline::cost::text(&c, args.top),
        crate::cli::CostFormat::Json => {
            format!("{}\n", serde_json::to_string_pretty(&c).unwrap_or_default())
        }
    };
    write_out(None, &out)?;
    Ok(0)
}

pub fn diff(args: crate::cli::DiffArgs) -> Result<i32, AppError> {
    let (an, a) = recording_named(&args.a)?;
    let (bn, b) = recording_named(&args.b)?;
    let th = crate::offline::diff::Thresholds {
        min_us: (args.duration_threshold * 1e6) as u64,
        ratio: args.duration_ratio,
    };
    let d = crate::offline::diff::diff_counting(&an, &a, &bn, &b, th, args.tokenizer);
    let out = match args.format {
        crate::cli::DiffFormat::Text => crate::offline::diff::text(&d),
        crate::cli::DiffFormat::Markdown => crate::offline::diff::markdown(&d),
        crate::cli::DiffFormat::Json => {
            format!("{}\n", serde_json::to_string_pretty(&d).unwrap_or_default())
        }
    };
    write_out(None, &out)?;
    Ok(i32::from(args.exit_code && d.regressions() > 0))
}
