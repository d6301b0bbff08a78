//! The deployment examples are valid: `config/kubernetes/sidecar.yaml` against the Kubernetes
//! API schema (kubernetes-validate, strict: unknown fields are errors), `config/systemd/
//! rpctap.service` with `systemd-analyze verify` (no warning allowed), and the rpctap command
//! lines they hold parse with this build's flags.
//!
//! Not validated here: that the images exist, that the Pod schedules (no cluster), that the
//! unit's sandboxing lets rpctap run (no systemd as PID 1 in the test machine).

use crate::common::*;
use std::process::Command;

#[test]
fn the_kubernetes_sidecar_example_passes_the_api_schema() {
    let env = installed("k8s", &["kubernetes-validate==1.37.0"]);
    let file = root().join("config/kubernetes/sidecar.yaml");
    let out = Command::new(env.join("bin/kubernetes-validate"))
        .args(["--strict", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("passed for resource pod/mcp-server"),
        "{text}"
    );
    assert!(!text.contains("ERROR") && !text.contains("WARN"), "{text}");

    // A misspelt field is caught (the check can fail).
    let tmp = Scratch::new("deploy-k8s");
    let bad = tmp.join("bad.yaml");
    let yaml = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&bad, yaml.replace("readinessProbe", "readinesProbe")).unwrap();
    let out = Command::new(env.join("bin/kubernetes-validate"))
        .args(["--strict", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());

    // The sidecar's rpctap arguments are accepted by this build (parsed, not run: the
    // upstream is not there): a usage error would exit 2 before anything else.
    let args = sidecar_args(&yaml);
    assert!(
        args.contains(&"--admin=0.0.0.0:9100".to_string()),
        "{args:?}"
    );
    let out = rpctap().args(&args).args(["--help"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `args:` list of the rpctap container.
fn sidecar_args(yaml: &str) -> Vec<String> {
    let start = yaml.find("- name: rpctap").unwrap();
    let rest = &yaml[start..];
    let args = rest.find("args:").unwrap();
    rest[args + 5..]
        .lines()
        .skip(1)
        .take_while(|l| l.trim_start().starts_with("- "))
        .map(|l| l.trim_start().trim_start_matches("- ").to_string())
        .collect()
}

#[test]
fn the_systemd_unit_verifies_cleanly() {
    let unit = std::fs::read_to_string(root().join("config/systemd/rpctap.service")).unwrap();
    for must in [
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "ReadWritePaths=/var/lib/rpctap",
    ] {
        assert!(unit.contains(must), "{must}");
    }
    // The unit names the installed binary; here it points at this build's.
    let tmp = Scratch::new("deploy-systemd");
    let file = tmp.join("rpctap.service");
    std::fs::write(
        &file,
        unit.replace("/usr/local/bin/rpctap", env!("CARGO_BIN_EXE_rpctap")),
    )
    .unwrap();
    let verify = |f: &std::path::Path| {
        Command::new("systemd-analyze")
            .args(["verify", f.to_str().unwrap()])
            .output()
            .expect("systemd-analyze is installed by scripts/peers.sh (Debian's systemd)")
    };
    let out = verify(&file);
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(text.trim().is_empty(), "no warning: {text}");
    // An unknown setting is reported (the check can fail).
    let bad = tmp.join("bad.service");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&file)
            .unwrap()
            .replace("NoNewPrivileges", "NoNewPrivilege"),
    )
    .unwrap();
    let out = verify(&bad);
    assert!(String::from_utf8_lossy(&out.stderr).contains("Unknown key"));

    // Its rpctap command line parses with this build.
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart=/usr/local/bin/rpctap "))
        .unwrap();
    let out = rpctap()
        .args(exec.split_whitespace())
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The shipped binary is built stripped (it was 88 MB of mostly debug info); the `profiling`
/// profile keeps the same code with symbols for perf and callgrind.
#[test]
fn the_release_profile_ships_stripped_and_profiling_keeps_symbols() {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let cargo: toml::Value = toml::from_str(&text).unwrap();
    let profile = &cargo["profile"];
    assert_eq!(profile["release"]["strip"].as_bool(), Some(true));
    assert_eq!(profile["release"]["debug"].as_bool(), Some(false));
    assert_eq!(profile["profiling"]["inherits"].as_str(), Some("release"));
    assert_eq!(profile["profiling"]["strip"].as_bool(), Some(false));
    assert_eq!(profile["profiling"]["debug"].as_integer(), Some(1));
}

/// `lib.rs`'s module map names every module the crate has.
#[test]
fn the_module_map_names_every_module() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let mods: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    assert!(mods.len() > 10, "{mods:?}");
    for m in mods {
        assert!(
            lib.contains(&format!("//! - [`{m}`]")),
            "src/lib.rs's module map does not name `{m}`"
        );
    }
}
