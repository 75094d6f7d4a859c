//! Label selectors (equality and set-based) and field selectors, parsed from query strings, and
//! matching of `metav1.LabelSelector` objects (webhook namespace and object selectors).

use serde_json::{Map, Value};

use crate::meta;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

/// Split on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected '(' values ')', found {rest:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parse `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            if let Some(k) = p.strip_prefix('!') {
                reqs.push(Req::NotExists(k.trim().to_string()));
            } else if let Some((k, v)) = p.split_once("!=") {
                reqs.push(Req::Ne(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = p.split_once("==") {
                reqs.push(Req::Eq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = p.split_once('=') {
                reqs.push(Req::Eq(k.trim().into(), v.trim().into()));
            } else if let Some(idx) = p.find(" notin ").or_else(|| p.find(" notin(")) {
                reqs.push(Req::NotIn(
                    p[..idx].trim().into(),
                    parse_set(&p[idx + 6..])?,
                ));
            } else if let Some(idx) = p.find(" in ").or_else(|| p.find(" in(")) {
                reqs.push(Req::In(p[..idx].trim().into(), parse_set(&p[idx + 3..])?));
            } else if p.contains([' ', '(', ')', '<', '>']) {
                return Err(format!("unable to parse requirement: {p:?}"));
            } else {
                reqs.push(Req::Exists(p.to_string()));
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Build from a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`).
    pub fn from_object(sel: &Value) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if let Some(ml) = sel.get("matchLabels").and_then(|m| m.as_object()) {
            for (k, v) in ml {
                reqs.push(Req::Eq(k.clone(), v.as_str().unwrap_or("").to_string()));
            }
        }
        if let Some(me) = sel.get("matchExpressions").and_then(|m| m.as_array()) {
            for e in me {
                let key = e
                    .get("key")
                    .and_then(|k| k.as_str())
                    .unwrap_or("")
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(|v| v.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                match e.get("operator").and_then(|o| o.as_str()).unwrap_or("") {
                    "In" => reqs.push(Req::In(key, values)),
                    "NotIn" => reqs.push(Req::NotIn(key, values)),
                    "Exists" => reqs.push(Req::Exists(key)),
                    "DoesNotExist" => reqs.push(Req::NotExists(key)),
                    op => return Err(format!("unknown label selector operator {op:?}")),
                }
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Match a label map.
    pub fn matches_labels(&self, labels: Option<&Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(|v| v.as_str());
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }

    /// Match an object's labels.
    pub fn matches(&self, obj: &Value) -> bool {
        self.is_empty() || self.matches_labels(meta::labels(obj))
    }
}

/// A parsed field selector: `field=value`, `field==value`, `field!=value`, comma separated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parse a field selector query string.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in s.split(',') {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let (k, eq, v) = if let Some((k, v)) = p.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid selector: '{p}'; can't understand '{p}'"));
            };
            out.push((k.trim().to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    /// Whether the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value `metadata.name=` asks for, if any (used to narrow a list).
    pub fn name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    /// Match an object: a missing field counts as the empty string, as the real server does.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let actual = match meta::path(obj, k) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            };
            (actual == *v) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let o = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}}});
        for (s, want) in [
            ("app=web", true),
            ("app==web,tier=fe", true),
            ("app!=web", false),
            ("app in (db, web)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("missing notin (x)", true),
            ("", true),
        ] {
            assert_eq!(LabelSelector::parse(s).unwrap().matches(&o), want, "{s}");
        }
        assert!(LabelSelector::parse("a b").is_err());
    }

    #[test]
    fn field_selectors() {
        let o = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        assert!(
            FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed")
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("spec.schedulerName=")
                .unwrap()
                .matches(&o)
        );
        assert!(!FieldSelector::parse("metadata.name=q").unwrap().matches(&o));
        assert!(FieldSelector::parse("bogus").is_err());
    }

    #[test]
    fn object_selectors() {
        let s = LabelSelector::from_object(&json!({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]})).unwrap();
        assert!(s.matches(&json!({"metadata": {"labels": {"a": "1"}}})));
        assert!(!s.matches(&json!({"metadata": {"labels": {"a": "1", "b": "x"}}})));
    }
}
