//! The config file loader: any text parses into a config, or is refused with a message naming
//! what is wrong — never a panic; a parsed one then validates (merging with no flags) or is
//! refused the same way.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(file) = rpctap::config::FileConfig::parse(text) {
        let flags = rpctap::cli::ProxyFlags::default();
        let _ = rpctap::config::conn_limits(&flags, &file);
        let _ = rpctap::config::admin_config(&flags, &file);
    }
});
