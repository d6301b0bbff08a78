//! `rpctap config wrap|unwrap [FILE] [--client C] [--dry-run]`: a desktop client's MCP config
//! rewritten so that every stdio server runs through `rpctap stdio --label NAME --`
//! (`crate::hub::clients`), backed up first, and restored by `unwrap`.

use super::AppError;
use crate::cli::{ClientKind, ConfigAction, ConfigArgs, WrapArgs};
use crate::hub::clients::{self, Change};
use clap::ValueEnum;
use std::path::{Path, PathBuf};

fn err(e: impl std::fmt::Display) -> AppError {
    AppError::Io(e.to_string())
}

/// `rpctap config …`.
pub fn config(args: ConfigArgs) -> Result<i32, AppError> {
    match args.action {
        ConfigAction::Wrap(a) => run(a, true),
        ConfigAction::Unwrap(a) => run(a, false),
    }
}

/// The files to change: the one given, the client's, or every client's that exists.
fn files(a: &WrapArgs) -> Result<Vec<PathBuf>, AppError> {
    if let Some(f) = &a.file {
        return Ok(vec![f.clone()]);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .ok_or_else(|| err("HOME is not set: name the config file"))?;
    let cwd = std::env::current_dir().map_err(err)?;
    let clients: Vec<ClientKind> = match a.client {
        Some(c) => vec![c],
        None => ClientKind::value_variants().to_vec(),
    };
    let mut looked = Vec::new();
    let mut found = Vec::new();
    for c in clients {
        for p in clients::default_paths(c, &home, &cwd) {
            if p.is_file() {
                found.push(p);
                break;
            }
            if !looked.contains(&p) {
                looked.push(p);
            }
        }
    }
    if found.is_empty() {
        return Err(err(format!(
            "no client config found (looked in: {}); name the file: rpctap config wrap FILE",
            looked
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(found)
}

/// Writes `text` in place of `path` whole (aside, then renamed in), keeping its mode.
fn replace(path: &Path, text: &str) -> Result<(), AppError> {
    let tmp = path.with_extension("rpctap.tmp");
    std::fs::write(&tmp, text).map_err(|e| err(format!("{}: {e}", tmp.display())))?;
    if let Ok(m) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&tmp, m.permissions());
    }
    std::fs::rename(&tmp, path).map_err(|e| err(format!("{}: {e}", path.display())))
}

fn run(a: WrapArgs, wrapping: bool) -> Result<i32, AppError> {
    let rpctap = match &a.rpctap {
        Some(p) => p.display().to_string(),
        None => std::env::current_exe()
            .and_then(|p| p.canonicalize())
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "rpctap".into()),
    };
    for path in files(&a)? {
        let text =
            std::fs::read_to_string(&path).map_err(|e| err(format!("{}: {e}", path.display())))?;
        let shown = path.display().to_string();
        let backup = clients::backup_path(&path);
        let in_file = |e: clients::ClientError| err(format!("{shown}: {e}"));
        if !wrapping && !clients::has_wrapped(&text).map_err(in_file)? {
            // Nothing of rpctap's: the file is the user's, untouched (and a backup left by an
            // earlier `wrap` stays where it is).
            println!("{shown}: nothing to unwrap (no entry runs through rpctap)");
            continue;
        }
        let (new, changes, restored) = if wrapping {
            let (new, changes) = clients::wrap(&text, &rpctap).map_err(in_file)?;
            (new, changes, false)
        } else {
            unwrapped(&text, &backup).map_err(in_file)?
        };
        say(&shown, &changes, wrapping);
        if new == text {
            println!("{shown}: nothing to change");
            continue;
        }
        if a.dry_run {
            print!("{}", clients::diff(&text, &new));
            println!("{shown}: dry run, nothing written");
            continue;
        }
        if wrapping {
            write_backup(&backup, &text)?;
            replace(&path, &new)?;
            println!("{shown}: wrapped (the original is in {}); restart the client, then run `rpctap watch`", backup.display());
        } else if restored {
            replace(&path, &new)?;
            let _ = std::fs::remove_file(&backup);
            println!("{shown}: restored as it was before `wrap`");
        } else {
            // The file changed since `wrap` (or was wrapped by hand): the wrapped entries are
            // undone in place, and the file as it was is kept.
            let aside = clients::unwrap_backup_path(&path);
            write_backup(&aside, &text)?;
            replace(&path, &new)?;
            println!(
                "{shown}: unwrapped entry by entry, comments and layout kept (it changed since `wrap`; the file as it was is in {})",
                aside.display()
            );
        }
    }
    Ok(0)
}

fn write_backup(to: &Path, text: &str) -> Result<(), AppError> {
    std::fs::write(to, text).map_err(|e| err(format!("{}: {e}", to.display())))
}

/// Unwrap: the backup byte for byte when the file is still what `wrap` made of it (the
/// entries the backup itself had wrapped unwrapped too; `true`), else entry by entry.
fn unwrapped(
    text: &str,
    backup: &Path,
) -> Result<(String, Vec<Change>, bool), clients::ClientError> {
    let names = clients::unwrap(text)?;
    if let Ok(orig) = std::fs::read_to_string(backup) {
        if same_after_wrap(&orig, text) {
            let (entries, changes) = clients::unwrap(&orig)?;
            let restored = if changes.iter().any(|c| matches!(c, Change::Unwrapped(_))) {
                entries
            } else {
                orig
            };
            return Ok((restored, names.1, true));
        }
    }
    Ok((names.0, names.1, false))
}

/// Whether `current` is what `wrap` made of `orig` (with whatever rpctap path it used).
fn same_after_wrap(orig: &str, current: &str) -> bool {
    match clients::wrapped_with(current) {
        Some(p) => clients::wrap(orig, &p).is_ok_and(|(w, _)| w == current),
        None => false,
    }
}

fn say(file: &str, changes: &[Change], wrapping: bool) {
    let list = |f: fn(&Change) -> Option<&String>| {
        changes
            .iter()
            .filter_map(f)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    };
    let wrapped = list(|c| match c {
        Change::Wrapped(n) | Change::Unwrapped(n) => Some(n),
        _ => None,
    });
    let remote = list(|c| match c {
        Change::Remote(n) => Some(n),
        _ => None,
    });
    if !wrapped.is_empty() {
        let verb = if wrapping { "wraps" } else { "unwraps" };
        println!("{file}: {verb} {wrapped}");
    }
    if !remote.is_empty() {
        println!("{file}: left alone (URL servers, not stdio): {remote}");
    }
}
