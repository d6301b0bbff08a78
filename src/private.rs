//! Files and folders only their owner may read: what rpctap keeps of the traffic (the hub's
//! state and runtime directories, baselines) holds tool names, schemas and sessions another
//! local user has no business reading. Folders are made `0700` — every one made on the way
//! too, not only the last — and files `0600`, from the moment they exist (no window in which
//! the umask's mode applies).

use std::io::Write as _;
use std::path::Path;

/// Makes `d` and any missing parent, each `0700`; an existing `d` is set to `0700` too.
pub fn dir(d: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
        b.mode(0o700);
        b.create(d)?;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
    }
    #[cfg(not(unix))]
    b.create(d)
}

/// Creates (or truncates) a file only its owner may read (mode 0600 from its creation; an
/// existing file keeps its mode through `open`, so it is set too): recordings, everything
/// exported from them, baselines, registrations.
pub fn create(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        o.mode(0o600);
    }
    let f = o.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(f)
}

/// Writes `bytes` to a new or truncated `path` made by [`create`].
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    create(path)?.write_all(bytes)
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    fn mode(p: &std::path::Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn every_folder_made_and_every_file_written_is_the_owners_alone() {
        let root = std::env::temp_dir().join(format!("rpctap-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let deep = root.join("a/b/c");
        super::dir(&deep).unwrap();
        for p in [root.join("a"), root.join("a/b"), deep.clone()] {
            assert_eq!(mode(&p), 0o700, "{}", p.display());
        }
        let f = deep.join("x.json");
        std::fs::write(&f, b"old").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        super::write(&f, b"new").unwrap();
        assert_eq!(mode(&f), 0o600);
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
