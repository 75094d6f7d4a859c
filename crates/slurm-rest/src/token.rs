//! Where the JWT for `X-SLURM-USER-TOKEN` comes from: a fixed string, or a file that is
//! re-read whenever it changes (Kubernetes Secrets are replaced in place).

use crate::error::Error;
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Source of the Slurm JWT. `Debug` never shows the token.
#[derive(Clone)]
pub enum TokenProvider {
    /// No token (requests carry no `X-SLURM-USER-TOKEN`; useful with `rest_auth/local`).
    None,
    /// A fixed token.
    Static(String),
    /// A token file, re-read when its inode, size, mtime or ctime changes. Build it with
    /// [`TokenProvider::file`].
    File(Arc<FileToken>),
}

impl fmt::Debug for TokenProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenProvider::None => f.write_str("None"),
            TokenProvider::Static(_) => f.write_str("Static(<redacted>)"),
            TokenProvider::File(t) => f.debug_tuple("File").field(&t.path).finish(),
        }
    }
}

impl TokenProvider {
    /// A token file provider. The file holds the JWT, optionally as `SLURM_JWT=<jwt>` (the
    /// output of `scontrol token`); surrounding whitespace is ignored.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        TokenProvider::File(Arc::new(FileToken {
            path: path.into(),
            cache: Mutex::new(None),
        }))
    }

    /// The token to send now, `None` for [`TokenProvider::None`]. For a file this costs one
    /// `stat`, plus a read when the file changed.
    pub fn token(&self) -> Result<Option<Arc<str>>, Error> {
        match self {
            TokenProvider::None => Ok(None),
            TokenProvider::Static(t) => {
                let t = t.trim();
                if t.is_empty() {
                    return Err(Error::token("auth token cannot be empty".into(), None));
                }
                Ok(Some(Arc::from(t)))
            }
            TokenProvider::File(f) => f.token().map(Some),
        }
    }
}

/// Identity of a file version: a replaced or rewritten file differs in at least one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: Option<SystemTime>,
    ctime: (i64, i64),
}

/// A token file and the last token read from it.
pub struct FileToken {
    path: PathBuf,
    cache: Mutex<Option<(Stamp, Arc<str>)>>,
}

impl fmt::Debug for FileToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileToken")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl FileToken {
    /// Path of the token file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn token(&self) -> Result<Arc<str>, Error> {
        let path = &self.path;
        if path.as_os_str().is_empty() {
            return Err(Error::token("token file path cannot be empty".into(), None));
        }
        let meta = std::fs::metadata(path).map_err(|e| {
            Error::token(
                format!("unable to read token file {}", path.display()),
                Some(e),
            )
        })?;
        let stamp = Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: meta.modified().ok(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((s, t)) = cache.as_ref()
            && *s == stamp
        {
            return Ok(t.clone());
        }
        let raw = std::fs::read_to_string(path).map_err(|e| {
            Error::token(
                format!("unable to read token file {}", path.display()),
                Some(e),
            )
        })?;
        let token = parse_token(&raw)
            .ok_or_else(|| Error::token(format!("token file {} is empty", path.display()), None))?;
        let token: Arc<str> = Arc::from(token);
        tracing::debug!(path = %path.display(), "read Slurm token file");
        *cache = Some((stamp, token.clone()));
        Ok(token)
    }
}

/// Trim, strip an optional `SLURM_JWT=` prefix, trim again; `None` when nothing is left.
pub(crate) fn parse_token(raw: &str) -> Option<&str> {
    let t = raw.trim();
    let t = t.strip_prefix("SLURM_JWT=").unwrap_or(t).trim();
    (!t.is_empty()).then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_prefixed_tokens() {
        assert_eq!(parse_token("abc\n"), Some("abc"));
        assert_eq!(parse_token("  SLURM_JWT=abc.def \n"), Some("abc.def"));
        assert_eq!(parse_token("SLURM_JWT= \n"), None);
        assert_eq!(parse_token(""), None);
    }

    #[test]
    fn debug_never_shows_the_token() {
        let p = TokenProvider::Static("secret-jwt".into());
        assert!(!format!("{p:?}").contains("secret-jwt"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "secret-jwt").unwrap();
        let f = TokenProvider::file(&path);
        assert_eq!(f.token().unwrap().as_deref(), Some("secret-jwt"));
        assert!(!format!("{f:?}").contains("secret-jwt"));
    }

    #[test]
    fn file_is_re_read_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "SLURM_JWT=first\n").unwrap();
        let p = TokenProvider::file(&path);
        assert_eq!(p.token().unwrap().as_deref(), Some("first"));
        // Replaced atomically (as kubelet does): new inode.
        let tmp = dir.path().join("token.new");
        std::fs::write(&tmp, "second").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert_eq!(p.token().unwrap().as_deref(), Some("second"));
        // Rewritten in place with a different length.
        std::fs::write(&path, "third-token").unwrap();
        assert_eq!(p.token().unwrap().as_deref(), Some("third-token"));
        // Emptied: an authentication error naming the file, not a stale token.
        std::fs::write(&path, "  \n").unwrap();
        let e = p.token().unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Authentication);
        assert!(e.to_string().contains("is empty"), "{e}");
        std::fs::remove_file(&path).unwrap();
        let e = p.token().unwrap_err();
        assert!(e.to_string().contains("unable to read token file"), "{e}");
    }
}
