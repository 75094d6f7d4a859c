//! kube-apiserver behind the proxy: the server, CA and client identity read from a kubeconfig,
//! and the same kubeconfig pointed at the proxy for the client.

use crate::error::{Error, Result};
use crate::proxy::{Upstream, parse_url};
use base64::Engine;
use serde_json::Value;
use std::path::Path;

fn read(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    serde_saphyr::from_str(&text)
        .map_err(|e| Error::Upstream(format!("kubeconfig {}: {e}", path.display())))
}

/// The named entry `name` of the list `list` (`clusters`, `users`) under `field`.
fn entry<'a>(cfg: &'a Value, list: &str, field: &str, name: &str) -> Option<&'a Value> {
    cfg[list]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| &e[field])
}

/// The current context's (cluster, user) names.
fn current(cfg: &Value, path: &Path) -> Result<(String, String)> {
    let name = cfg["current-context"].as_str().unwrap_or_default();
    let ctx = entry(cfg, "contexts", "context", name).ok_or_else(|| {
        Error::Upstream(format!(
            "kubeconfig {}: no context {name:?} (current-context)",
            path.display()
        ))
    })?;
    let s = |k: &str| ctx[k].as_str().unwrap_or_default().to_string();
    Ok((s("cluster"), s("user")))
}

fn decode(v: &Value, what: &str, path: &Path) -> Result<Option<String>> {
    let Some(b64) = v.as_str() else {
        return Ok(None);
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| Error::Upstream(format!("kubeconfig {}: {what}: {e}", path.display())))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| Error::Upstream(format!("kubeconfig {}: {what}: {e}", path.display())))
}

/// The current context's server, its `certificate-authority-data` and the user's
/// `client-certificate-data`/`client-key-data` (the forms kube-testenv writes).
pub fn upstream(path: &Path) -> Result<Upstream> {
    let cfg = read(path)?;
    let (cluster, user) = current(&cfg, path)?;
    let c = entry(&cfg, "clusters", "cluster", &cluster).ok_or_else(|| {
        Error::Upstream(format!(
            "kubeconfig {}: no cluster {cluster:?}",
            path.display()
        ))
    })?;
    let server = c["server"].as_str().ok_or_else(|| {
        Error::Upstream(format!(
            "kubeconfig {}: cluster {cluster:?} has no server",
            path.display()
        ))
    })?;
    let u = entry(&cfg, "users", "user", &user)
        .cloned()
        .unwrap_or(Value::Null);
    let identity = match (
        decode(
            &u["client-certificate-data"],
            "client-certificate-data",
            path,
        )?,
        decode(&u["client-key-data"], "client-key-data", path)?,
    ) {
        (Some(c), Some(k)) => Some((c, k)),
        _ => None,
    };
    Ok(Upstream {
        url: parse_url(server)?,
        ca_pem: decode(
            &c["certificate-authority-data"],
            "certificate-authority-data",
            path,
        )?,
        identity,
    })
}

/// Writes `src` to `dst` with the current cluster's server replaced by `proxy_url` (as JSON,
/// which every kubeconfig reader takes as YAML).
pub fn write_pointed_at(src: &Path, proxy_url: &str, dst: &Path) -> Result<()> {
    let mut cfg = read(src)?;
    let (cluster, _) = current(&cfg, src)?;
    let clusters = cfg["clusters"]
        .as_array_mut()
        .ok_or_else(|| Error::Upstream(format!("kubeconfig {}: no clusters", src.display())))?;
    for c in clusters
        .iter_mut()
        .filter(|c| c["name"] == cluster.as_str())
    {
        c["cluster"]["server"] = Value::String(proxy_url.to_string());
    }
    std::fs::write(dst, cfg.to_string()).map_err(|source| Error::Io {
        path: dst.display().to_string(),
        source,
    })
}
