//! Tool baselines: the tools a server was trusted with. The first complete `tools/list` seen for
//! a server label becomes its baseline (a file `LABEL.json` in the state directory's
//! `baselines/`, or in `--baseline DIR` for one checked in beside the code); every later complete
//! list is compared with it field by field, and each change is `MCP_TOOL_DRIFT` — an error when a
//! safety annotation got less safe or a tool's schema changed (the "rug pull" the specification
//! warns clients about), a warning otherwise. `rpctap baseline show|accept|reset` manages them.
//!
//! The live inspector holds one [`Live`] for its server's label; `check` holds one that never
//! writes (it compares a recording with the baseline as it is now). How two sets of offered
//! tools, prompts or resources differ ([`offer_changes`]) is decided here, for the drift and for
//! `rpctap diff` alike.

use crate::locks::Locked as _;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Why a baseline could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a baseline ({why})")]
    Invalid { path: PathBuf, why: String },
}

/// A server's trusted tools.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Baseline {
    pub label: String,
    /// When it was accepted (ns since the epoch).
    pub accepted_ns: u64,
    /// Each tool's definition as `tools/list` gave it, by name.
    pub tools: BTreeMap<String, Value>,
}

/// A label as a file name: letters, digits and `.-_` (others become `_`).
fn file_name(label: &str) -> String {
    let name: String = label
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{name}.json")
}

/// Where a label's baseline lives in `dir`.
pub fn path(dir: &Path, label: &str) -> PathBuf {
    dir.join(file_name(label))
}

/// The baseline of `label` in `dir`, if there is one.
pub fn load(dir: &Path, label: &str) -> Result<Option<Baseline>, BaselineError> {
    let p = path(dir, label);
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| BaselineError::Invalid {
                path: p,
                why: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(BaselineError::Io { path: p, source: e }),
    }
}

/// Writes `b` as its label's baseline in `dir` (whole, through a temporary file).
pub fn save(dir: &Path, b: &Baseline) -> Result<PathBuf, BaselineError> {
    let p = path(dir, &b.label);
    let io = |e| BaselineError::Io {
        path: p.clone(),
        source: e,
    };
    // The owner's alone, as every file of the state directory (`crate::private`).
    crate::private::dir(dir).map_err(io)?;
    let tmp = p.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(b).unwrap_or_default();
    crate::private::write(&tmp, &text).map_err(io)?;
    std::fs::rename(&tmp, &p).map_err(io)?;
    Ok(p)
}

/// Removes `label`'s baseline; whether there was one.
pub fn reset(dir: &Path, label: &str) -> Result<bool, BaselineError> {
    let p = path(dir, label);
    match std::fs::remove_file(&p) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(BaselineError::Io { path: p, source: e }),
    }
}

/// One tool's drift: whether it is an error (less safe, or a schema changed), and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drift {
    pub error: bool,
    pub tool: String,
    pub what: String,
}

/// How `now` differs from the trusted `base`.
pub fn drift(base: &BTreeMap<String, Value>, now: &BTreeMap<String, Value>) -> Vec<Drift> {
    let mut changes: Vec<Change> = Vec::new();
    offer_changes("tool", base, now, &mut changes);
    changes
        .into_iter()
        .map(|c| Drift {
            error: c.area == "safety" || c.what.contains("Schema changed"),
            tool: c
                .subject
                .strip_prefix("tool ")
                .unwrap_or(&c.subject)
                .to_string(),
            what: c.what,
        })
        .collect()
}

/// The baseline a running inspector compares with: its label's, read at start, written from the
/// first complete list when there was none (unless read-only, as in `check`).
#[derive(Debug)]
pub struct Live {
    pub label: String,
    dir: Option<PathBuf>,
    tools: Mutex<Option<BTreeMap<String, Value>>>,
}

impl Live {
    /// The label's baseline in `dir`; `write` lets the first complete list become it.
    pub fn open(dir: &Path, label: &str, write: bool) -> Result<Live, BaselineError> {
        let b = load(dir, label)?;
        Ok(Live {
            label: label.to_string(),
            dir: write.then(|| dir.to_path_buf()),
            tools: Mutex::new(b.map(|b| b.tools)),
        })
    }

    /// A complete list was seen: its drift from the baseline (none when it becomes the baseline).
    pub fn seen(&self, now: &BTreeMap<String, Value>) -> Vec<Drift> {
        let mut held = self.tools.locked();
        match &*held {
            Some(base) => drift(base, now),
            None => {
                if let Some(dir) = &self.dir {
                    let b = Baseline {
                        label: self.label.clone(),
                        accepted_ns: crate::events::now_ns(),
                        tools: now.clone(),
                    };
                    match save(dir, &b) {
                        Ok(p) => {
                            tracing::info!(label = %self.label, path = %p.display(), "tool baseline taken from the first complete tools/list")
                        }
                        Err(e) => {
                            tracing::warn!(label = %self.label, error = %e, "cannot write the tool baseline")
                        }
                    }
                    *held = Some(now.clone());
                }
                Vec::new()
            }
        }
    }
}

/// How bad a change is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Gets worse for a client: fails `--exit-code`.
    Regression,
    /// Neither worse nor better (a description, a new call).
    Change,
    Improvement,
}

/// One difference.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    pub kind: Kind,
    /// `safety`, `tool`, `prompt`, `resource`, `call`, `latency`.
    pub area: &'static str,
    /// What it is about: `tool search`, `tools/call search {"q":"x"}`.
    pub subject: String,
    pub what: String,
}

/// A safety annotation and which way is less safe.
const SAFETY: [(&str, bool); 4] = [
    // (annotation, the value that is the less safe one)
    ("readOnlyHint", false),
    ("destructiveHint", true),
    ("idempotentHint", false),
    ("openWorldHint", true),
];

/// The spec's defaults for absent annotations.
fn annotation(v: &Value, name: &str) -> bool {
    match v["annotations"][name].as_bool() {
        Some(b) => b,
        None => matches!(name, "destructiveHint" | "openWorldHint"),
    }
}

fn short(v: &Value) -> String {
    let t = v.to_string();
    if t.chars().count() > 80 {
        format!("{}…", t.chars().take(79).collect::<String>())
    } else {
        t
    }
}

/// The changes between two lists of one kind (`tool`, `prompt`, `resource`), by name.
pub fn offer_changes(
    kind: &'static str,
    a: &BTreeMap<String, Value>,
    b: &BTreeMap<String, Value>,
    out: &mut Vec<Change>,
) {
    for (name, old) in a {
        let subject = format!("{kind} {name}");
        let Some(new) = b.get(name) else {
            out.push(Change {
                kind: Kind::Regression,
                area: kind,
                subject,
                what: "removed".into(),
            });
            continue;
        };
        if kind == "tool" {
            for (hint, unsafe_value) in SAFETY {
                let (was, is) = (annotation(old, hint), annotation(new, hint));
                if was != is {
                    let worse = is == unsafe_value;
                    out.push(Change {
                        kind: if worse {
                            Kind::Regression
                        } else {
                            Kind::Improvement
                        },
                        area: if worse { "safety" } else { kind },
                        subject: subject.clone(),
                        what: format!(
                            "{hint} {was} → {is}{}",
                            if worse { " (less safe)" } else { "" }
                        ),
                    });
                }
            }
        }
        for field in ["title", "description", "mimeType"] {
            if old[field] != new[field] {
                out.push(Change {
                    kind: Kind::Change,
                    area: kind,
                    subject: subject.clone(),
                    what: format!("{field}: {} → {}", short(&old[field]), short(&new[field])),
                });
            }
        }
        for field in ["inputSchema", "outputSchema", "arguments"] {
            if crate::rpc::canonical(&old[field]) != crate::rpc::canonical(&new[field]) {
                out.push(Change {
                    kind: Kind::Regression,
                    area: kind,
                    subject: subject.clone(),
                    what: format!(
                        "{field} changed: {} → {}",
                        short(&old[field]),
                        short(&new[field])
                    ),
                });
            }
        }
        let (oa, na) = (&old["annotations"], &new["annotations"]);
        for k in oa
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .chain(na.as_object().into_iter().flatten().map(|(k, _)| k))
        {
            if SAFETY.iter().any(|(h, _)| h == k) || oa[k] == na[k] {
                continue;
            }
            let what = format!("annotation {k}: {} → {}", short(&oa[k]), short(&na[k]));
            if !out.iter().any(|c| c.subject == subject && c.what == what) {
                out.push(Change {
                    kind: Kind::Change,
                    area: kind,
                    subject: subject.clone(),
                    what,
                });
            }
        }
    }
    for name in b.keys().filter(|n| !a.contains_key(*n)) {
        out.push(Change {
            kind: Kind::Change,
            area: kind,
            subject: format!("{kind} {name}"),
            what: "added".into(),
        });
    }
}
