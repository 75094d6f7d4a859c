//! The `caBundle` of the named Mutating/ValidatingWebhookConfigurations kept equal to the CA
//! bundle.

use super::CertError;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use kube::api::{Api, PostParams};

/// Maps an API error on configuration `name` to [`CertError::Api`].
pub(super) fn api_err(name: &str) -> impl Fn(kube::Error) -> CertError + '_ {
    move |e| CertError::Api {
        name: name.into(),
        message: e.to_string(),
    }
}

/// Writes `bundle` into the webhooks `configs` gives of the configuration `name`, where it
/// differs: `None` when the configuration does not exist, else whether it was updated.
pub(super) async fn sync_one<K>(
    api: Api<K>,
    name: &str,
    bundle: &[u8],
    configs: impl for<'a> Fn(&'a mut K) -> Vec<&'a mut WebhookClientConfig>,
) -> Result<Option<bool>, CertError>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let Some(mut obj) = api.get_opt(name).await.map_err(api_err(name))? else {
        return Ok(None);
    };
    let mut changed = false;
    for c in configs(&mut obj) {
        if c.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle) {
            c.ca_bundle = Some(ByteString(bundle.to_vec()));
            changed = true;
        }
    }
    if changed {
        api.replace(name, &PostParams::default(), &obj)
            .await
            .map_err(api_err(name))?;
    }
    Ok(Some(changed))
}

/// Writes `bundle` into every webhook of the Mutating- and/or ValidatingWebhookConfiguration
/// `name` where it differs. Returns how many configurations were updated.
pub async fn sync_ca_bundle(
    client: &kube::Client,
    name: &str,
    bundle: &[u8],
) -> Result<usize, CertError> {
    let mutating = sync_one(
        Api::<MutatingWebhookConfiguration>::all(client.clone()),
        name,
        bundle,
        |m| {
            m.webhooks
                .iter_mut()
                .flatten()
                .map(|w| &mut w.client_config)
                .collect()
        },
    )
    .await?;
    let validating = sync_one(
        Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        name,
        bundle,
        |v| {
            v.webhooks
                .iter_mut()
                .flatten()
                .map(|w| &mut w.client_config)
                .collect()
        },
    )
    .await?;
    let found = mutating.is_some() || validating.is_some();
    let updated = [mutating, validating]
        .into_iter()
        .filter(|c| *c == Some(true))
        .count();
    if !found {
        return Err(CertError::NotFound(name.into()));
    }
    if updated > 0 {
        tracing::info!(configuration = name, "caBundle updated");
    }
    Ok(updated)
}
