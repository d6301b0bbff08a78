//! The recording reader: any text as a recording part (line by line, as `check` and `replay`
//! read a file) gives a recording or a clear error, never a panic; every line parses or is
//! refused on its own.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines() {
        let _ = rpctap::record::reader::parse_line(line);
    }
    let mut rec = rpctap::record::reader::Capture::default();
    let _ = rpctap::record::reader::parse_part(text, "fuzz.jsonl", &mut rec, true);
});
