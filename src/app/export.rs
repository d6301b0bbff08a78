//! `rpctap export`: a recording as exchange documents, HAR or the HTML report.

use super::{write_out, AppError};

/// `rpctap export`.
pub fn run(args: crate::cli::ExportArgs) -> Result<i32, AppError> {
    let rec = crate::record::reader::read(&args.file)?;
    let text = match args.format {
        crate::cli::ExportFormat::Exchange => {
            let (docs, warnings) =
                crate::record::export::exchange_documents(&rec, args.max_envelopes, args.max_bytes);
            for w in warnings {
                eprintln!("rpctap export: {w}");
            }
            docs.iter().map(|d| format!("{d}\n")).collect::<String>()
        }
        crate::cli::ExportFormat::Har => {
            format!(
                "{}\n",
                serde_json::to_string_pretty(&crate::record::export::har(&rec)).unwrap_or_default()
            )
        }
        crate::cli::ExportFormat::Html => crate::record::report::html_with(
            &rec,
            &args.file.display().to_string(),
            &[super::check::cost_section(&rec)],
        ),
    };
    write_out(args.output.as_deref(), &text)?;
    Ok(0)
}
