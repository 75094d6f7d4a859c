//! The kubelet's plugin APIs the agent serves, as protobuf messages derived by hand (no protoc,
//! no build script): plugin registration (`pluginregistration.Registration`, k8s.io/kubelet
//! pkg/apis/pluginregistration/v1) and DRA (`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin` and its
//! v1beta1 twin, which lacks `Device.share_id`), as kubelet v1.36 speaks them.

use std::collections::HashMap;

/// gRPC paths of the registration service (its proto package is `pluginregistration`).
pub const REGISTRATION_GET_INFO: &str = "/pluginregistration.Registration/GetInfo";
pub const REGISTRATION_NOTIFY: &str = "/pluginregistration.Registration/NotifyRegistrationStatus";
/// The DRA services served, as `PluginInfo.supported_versions` names them (`<package
/// suffix>.<service>`), newest first; the kubelet picks the first it knows.
pub const DRA_SERVICES: [&str; 2] = ["v1.DRAPlugin", "v1beta1.DRAPlugin"];
/// gRPC path prefixes of the DRA services (both take the same messages).
pub const DRA_V1: &str = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/";
pub const DRA_V1BETA1: &str = "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/";
/// The kubelet's device health watch (`ResourceHealthStatus`, on by default in 1.36): answered
/// with a stream that stays silent (no health changes to report).
pub const DRA_HEALTH_WATCH: &str = "/v1alpha1.DRAResourceHealth/NodeWatchResources";
/// `PluginInfo.type` of a DRA driver's plugin.
pub const DRA_PLUGIN_TYPE: &str = "DRAPlugin";

/// `GetInfo` request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InfoRequest {}

/// What the plugin is: type, name (the driver), where its service listens, which services.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginInfo {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub endpoint: String,
    #[prost(string, repeated, tag = "4")]
    pub supported_versions: Vec<String>,
}

/// The kubelet's verdict on a registration.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegistrationStatus {
    #[prost(bool, tag = "1")]
    pub plugin_registered: bool,
    #[prost(string, tag = "2")]
    pub error: String,
}

/// `NotifyRegistrationStatus` response.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegistrationStatusResponse {}

/// A claim the kubelet asks to prepare or unprepare.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Claim {
    #[prost(string, tag = "1")]
    pub namespace: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub name: String,
}

/// `NodePrepareResources` request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodePrepareResourcesRequest {
    #[prost(message, repeated, tag = "1")]
    pub claims: Vec<Claim>,
}

/// `NodePrepareResources` response: per claim uid.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodePrepareResourcesResponse {
    #[prost(map = "string, message", tag = "1")]
    pub claims: HashMap<String, NodePrepareResourceResponse>,
}

/// One claim's prepared devices, or why it could not be prepared.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodePrepareResourceResponse {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<Device>,
    #[prost(string, tag = "2")]
    pub error: String,
}

/// One prepared device: the claim's requests it serves and the CDI devices the containers
/// asking those requests get.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Device {
    #[prost(string, repeated, tag = "1")]
    pub request_names: Vec<String>,
    #[prost(string, tag = "2")]
    pub pool_name: String,
    #[prost(string, tag = "3")]
    pub device_name: String,
    #[prost(string, repeated, tag = "4")]
    pub cdi_device_ids: Vec<String>,
    #[prost(string, optional, tag = "5")]
    pub share_id: Option<String>,
}

/// `NodeUnprepareResources` request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnprepareResourcesRequest {
    #[prost(message, repeated, tag = "1")]
    pub claims: Vec<Claim>,
}

/// `NodeUnprepareResources` response: per claim uid.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnprepareResourcesResponse {
    #[prost(map = "string, message", tag = "1")]
    pub claims: HashMap<String, NodeUnprepareResourceResponse>,
}

/// One claim's unprepare outcome (`error` empty on success).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnprepareResourceResponse {
    #[prost(string, tag = "1")]
    pub error: String,
}
