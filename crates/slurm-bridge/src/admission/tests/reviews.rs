//! AdmissionReview decoding: malformed reviews, the responses, the HTTP handler's 400s.

use super::*;

#[test]
fn malformed_reviews_are_errors() {
    let ok = review_json("CREATE", pod_json(), None);
    assert!(review::decode(ok.to_string().as_bytes()).is_ok());
    let mut wrong_kind = ok.clone();
    wrong_kind["kind"] = json!("ConversionReview");
    let mut v1beta1 = ok.clone();
    v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let mut no_request = ok.clone();
    no_request.as_object_mut().unwrap().remove("request");
    let mut null_request = ok.clone();
    null_request["request"] = Value::Null;
    let mut no_object = ok.clone();
    no_object["request"]
        .as_object_mut()
        .unwrap()
        .remove("object");
    let mut bad_object = ok.clone();
    bad_object["request"]["object"] = json!({"spec": {"containers": "nope"}});
    let mut string_object = ok.clone();
    string_object["request"]["object"] = json!("pod");
    let mut deployment = ok.clone();
    deployment["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    let update_without_old = review_json("UPDATE", pod_json(), None);
    let mut no_uid = ok.clone();
    no_uid["request"].as_object_mut().unwrap().remove("uid");
    let mut bad_op = ok.clone();
    bad_op["request"]["operation"] = json!("PATCH");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty body", vec![]),
        ("not JSON", b"{not json".to_vec()),
        ("a JSON list", b"[1,2]".to_vec()),
        ("wrong kind", wrong_kind.to_string().into_bytes()),
        ("v1beta1", v1beta1.to_string().into_bytes()),
        ("no request", no_request.to_string().into_bytes()),
        ("null request", null_request.to_string().into_bytes()),
        ("no object", no_object.to_string().into_bytes()),
        ("object is not a pod", bad_object.to_string().into_bytes()),
        ("object is a string", string_object.to_string().into_bytes()),
        ("a Deployment", deployment.to_string().into_bytes()),
        (
            "UPDATE without oldObject",
            update_without_old.to_string().into_bytes(),
        ),
        ("no uid", no_uid.to_string().into_bytes()),
        ("bad operation", bad_op.to_string().into_bytes()),
    ];
    // What each error names (kube-core's decoder, then the webhook's own checks).
    let named: BTreeMap<&str, &str> = [
        ("no object", "has no object"),
        ("object is not a pod", "request.object is not a v1 Pod"),
        ("object is a string", "expected Pod"),
        ("a Deployment", "not apps/v1 Deployment"),
        ("UPDATE without oldObject", "has no oldObject"),
        ("no uid", "missing field `uid`"),
        ("bad operation", "unknown variant `PATCH`"),
    ]
    .into();
    for (name, body) in cases {
        assert!(review::decode(&body).is_err(), "{name}");
        let text = review::decode(&body).unwrap_err().to_string();
        if let Some(want) = named.get(name) {
            assert!(text.contains(want), "{name}: {text}");
        }
    }
    assert_eq!(
        review::decode(no_request.to_string().as_bytes()).unwrap_err(),
        ReviewError::MissingRequest
    );
}

#[test]
fn responses() {
    let mut req = create(pod(MANAGED, None, json!({})));
    req.uid = "u".into();
    let answer = |v: &Verdict| serde_json::to_value(review::response(&req, v)).unwrap();
    let allow = answer(&Verdict::allow());
    // kube-core writes an empty `status` beside `allowed: true` (the API server reads it as
    // no status); otherwise the answer is exactly this.
    assert_eq!(
        allow,
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u", "allowed": true, "status": {}}})
    );
    let patch: Patch = serde_json::from_value(json!([sched(BRIDGE)])).unwrap();
    let patched = answer(&Verdict::Allow(patch));
    assert_eq!(patched["response"]["patchType"], "JSONPatch");
    // kube-core writes the patch bytes as a JSON array of numbers, not base64 text; the API
    // server's decoder reads both into its []byte (admission_e2e shows it applied).
    let patch: Vec<u8> = serde_json::from_value(patched["response"]["patch"].clone()).unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    assert_eq!(patch, json!([sched(BRIDGE)]));
    let denied = answer(&Verdict::Deny(MSG_RESIZE.into()));
    assert_eq!(denied["response"]["allowed"], false);
    assert_eq!(denied["response"]["status"]["code"], 403);
    assert_eq!(denied["response"]["status"]["message"], MSG_RESIZE);
}

#[tokio::test]
async fn handler_answers_400_to_bad_input_and_reviews_otherwise() {
    let w = webhooks();
    for body in [&b""[..], b"{", b"{\"kind\":\"AdmissionReview\"}", b"null"] {
        let r = w.handle(Webhook::Validate, body).await;
        assert_eq!(r.status(), 400);
    }
    let r = w
        .handle(
            Webhook::Mutate,
            review_json("CREATE", pod_json(), None)
                .to_string()
                .as_bytes(),
        )
        .await;
    assert_eq!(r.status(), 200);
    let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["response"]["uid"], "u-1");
    assert_eq!(v["response"]["allowed"], true);
    assert_eq!(v["response"]["patchType"], "JSONPatch");
}
