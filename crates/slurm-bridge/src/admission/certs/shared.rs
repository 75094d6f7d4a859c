//! The CA shared between replicas through a Secret, so every replica signs its serving
//! certificate with the same CA and the one caBundle trusts them all. The Secret is the source
//! of truth, the cert dir its copy: a pass first copies the Secret's CA into the dir, lets the
//! usual step make or rotate it there, and publishes a changed CA back, created if absent or
//! replaced at the resourceVersion it read. When another replica wrote first (409), this one
//! takes theirs and tries again, so two replicas never keep different CAs.

use super::ca::Ca;
use super::files::{read_opt, write_atomic};
use super::{CA_CERT_FILE, CA_KEY_FILE, CertError, SelfManaged};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use std::collections::BTreeMap;
use std::time::SystemTime;

/// The Secret holding the shared CA (keys `ca.crt`, the bundle, and `ca.key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaSecret {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Attempts before a pass gives up on writes that keep conflicting.
const ATTEMPTS: usize = 4;

impl CaSecret {
    fn err(&self, e: kube::Error) -> CertError {
        CertError::Secret {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            message: e.to_string(),
        }
    }
}

/// The CA files held by `secret`, if it holds both.
fn files_of(secret: &Secret) -> Option<(Vec<u8>, Vec<u8>)> {
    let data = secret.data.as_ref()?;
    Some((
        data.get(CA_CERT_FILE)?.0.clone(),
        data.get(CA_KEY_FILE)?.0.clone(),
    ))
}

impl SelfManaged {
    /// Step 1 with the CA shared through `shared`: the CA in the dir equals the Secret's
    /// (made, rotated and published when needed). True when the dir's CA changed.
    pub(super) async fn ensure_shared_ca(
        &self,
        client: &kube::Client,
        shared: &CaSecret,
        now: SystemTime,
    ) -> Result<(Ca, bool), CertError> {
        let api: Api<Secret> = Api::namespaced(client.clone(), &shared.namespace);
        let before = read_opt(&self.dir.join(CA_CERT_FILE));
        for _ in 0..ATTEMPTS {
            let current = api.get_opt(&shared.name).await.map_err(|e| shared.err(e))?;
            let published = current.as_ref().and_then(files_of);
            if let Some((crt, key)) = &published {
                self.copy_in(crt, key)?;
            }
            let (ca, _) = self.ensure_ca(now)?;
            let (crt, key) = (
                ca.bundle_pem().into_bytes(),
                ca.key.serialize_pem().into_bytes(),
            );
            if published.as_ref() == Some(&(crt.clone(), key.clone())) {
                let changed = before.as_deref() != Some(crt.as_slice());
                return Ok((ca, changed));
            }
            // This replica made or rotated the CA: publish it, unless someone else did first.
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(shared.name.clone()),
                    namespace: Some(shared.namespace.clone()),
                    resource_version: current
                        .as_ref()
                        .and_then(|s| s.metadata.resource_version.clone()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_string(),
                        "slurm-bridge".to_string(),
                    )])),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([
                    (CA_CERT_FILE.to_string(), ByteString(crt.clone())),
                    (CA_KEY_FILE.to_string(), ByteString(key)),
                ])),
                type_: Some("Opaque".into()),
                ..Default::default()
            };
            let pp = PostParams::default();
            let written = match &current {
                None => api.create(&pp, &secret).await,
                Some(_) => api.replace(&shared.name, &pp, &secret).await,
            };
            match written {
                Ok(_) => {
                    tracing::info!(secret = %shared.name, namespace = %shared.namespace, "published the admission CA");
                    let changed = before.as_deref() != Some(crt.as_slice());
                    return Ok((ca, changed));
                }
                // 409: another replica created or replaced it first; take theirs.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    tracing::info!(secret = %shared.name, "another replica published the admission CA first; taking it");
                }
                Err(e) => return Err(shared.err(e)),
            }
        }
        Err(CertError::Secret {
            namespace: shared.namespace.clone(),
            name: shared.name.clone(),
            message: format!(
                "still conflicting after {ATTEMPTS} attempts; retrying at the next pass"
            ),
        })
    }

    /// Writes the Secret's CA into the dir where it differs.
    fn copy_in(&self, crt: &[u8], key: &[u8]) -> Result<(), CertError> {
        let key_path = self.dir.join(CA_KEY_FILE);
        if read_opt(&key_path).as_deref() != Some(key) {
            write_atomic(&key_path, key, 0o600)?;
        }
        let crt_path = self.dir.join(CA_CERT_FILE);
        if read_opt(&crt_path).as_deref() != Some(crt) {
            write_atomic(&crt_path, crt, 0o644)?;
        }
        Ok(())
    }
}
