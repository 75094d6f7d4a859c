//! The cert dir's files: written atomically (temporary name, then rename), keys mode 0600.

use super::CertError;
use std::io::Write;
use std::path::Path;

/// Writes `data` to a temporary file with `mode` and renames it to `path`.
pub(super) fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<(), CertError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |action| {
        move |source| CertError::Io {
            action,
            path: path.display().to_string(),
            source,
        }
    };
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy());
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io("writing"))?;
    f.write_all(data).map_err(io("writing"))?;
    f.sync_all().map_err(io("writing"))?;
    std::fs::rename(&tmp, path).map_err(io("renaming into"))
}

/// The file's bytes, or None when it cannot be read.
pub(super) fn read_opt(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}
