//! Selector matching as Kubernetes does it: one `nodeSelectorTerm` on a node's labels and name
//! (required node affinity, PV node affinity), and a label selector (managed namespaces,
//! tenants, a PVC's selector).

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

/// Whether `selector` matches `labels` (every `matchLabels` pair and every expression must
/// hold; the empty selector matches everything). A selector with an unknown operator matches
/// nothing rather than everything (the config loader refuses them; Kubernetes does too).
pub fn label_selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    use kube::core::{Selector, SelectorExt};
    Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels))
}

/// One node selector term: all expressions and fields must match; an empty term matches nothing.
pub fn term_matches(
    term: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
    node_name: &str,
) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            let value = (r.key == "metadata.name").then_some(node_name);
            requirement_matches(r, value)
        })
}

/// One requirement on a label (or field) value, `None` when the node has none.
fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}
