//! The Debian mirror, read from the host's own apt configuration (never hard-coded).

use crate::error::{Error, Result};
use std::path::Path;

/// Returns the mirror URL for the `debian` archive: `SLURM_TESTENV_MIRROR` if set, else the first
/// `URIs:` (deb822) or `deb` line (one-line format) of the host's apt sources that is not a
/// security archive.
pub fn debian_mirror() -> Result<String> {
    if let Ok(m) = std::env::var("SLURM_TESTENV_MIRROR")
        && !m.trim().is_empty()
    {
        return Ok(m.trim().to_string());
    }
    let mut files = vec![
        Path::new("/etc/apt/sources.list.d/debian.sources").to_path_buf(),
        Path::new("/etc/apt/sources.list").to_path_buf(),
    ];
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut extra: Vec<_> = dir.flatten().map(|e| e.path()).collect();
        extra.sort();
        files.extend(extra);
    }
    for file in files {
        if let Ok(text) = std::fs::read_to_string(&file)
            && let Some(m) = mirror_from_sources(&text)
        {
            return Ok(m);
        }
    }
    Err(Error::NoMirror(
        "no Debian archive found in /etc/apt/sources.list or /etc/apt/sources.list.d; set SLURM_TESTENV_MIRROR to a Debian mirror URL".into(),
    ))
}

/// Extracts the first non-security Debian archive URL from apt sources text (either format).
pub fn mirror_from_sources(text: &str) -> Option<String> {
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let candidates: Vec<&str> = if let Some(rest) = line.strip_prefix("URIs:") {
            rest.split_whitespace().collect()
        } else if let Some(rest) = line.strip_prefix("deb ") {
            // `deb [options] URL suite components`
            rest.split_whitespace()
                .filter(|w| w.contains("://"))
                .take(1)
                .collect()
        } else {
            Vec::new()
        };
        for uri in candidates {
            let uri = uri.trim_end_matches('/');
            if uri.contains("://") && !uri.contains("security") && !uri.contains("-ports") {
                return Some(uri.to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deb822_skips_security() {
        let text = "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: x\n\nTypes: deb\nURIs: http://mirror.example/debian/\n";
        assert_eq!(
            mirror_from_sources(text).as_deref(),
            Some("http://mirror.example/debian")
        );
    }

    #[test]
    fn one_line_format_with_options() {
        let text =
            "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main\n";
        assert_eq!(
            mirror_from_sources(text).as_deref(),
            Some("http://m.example/debian")
        );
    }

    #[test]
    fn nothing_found() {
        assert_eq!(
            mirror_from_sources("# deb http://x/debian sid main\n"),
            None
        );
    }
}
