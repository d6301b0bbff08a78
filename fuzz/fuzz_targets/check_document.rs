//! The exchange-document checker (`rpctap check` of a seed-004 document) with small limits: any
//! bytes give findings or a clear error, never a panic, and stay within the limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpctap::inspect::offline::{check_document, CheckLimits};

fuzz_target!(|data: &[u8]| {
    let limits = CheckLimits {
        max_envelopes: 64,
        max_bytes: 16 * 1024,
        ..CheckLimits::unlimited()
    };
    let _ = check_document(data, &limits);
});
