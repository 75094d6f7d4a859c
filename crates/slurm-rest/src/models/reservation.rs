//! Reservation models (`v0.0.44_reservation_info`).

use super::de::null_default;
use super::{NoVal, ReservationFlag};
use serde::{Deserialize, Serialize};

/// A reservation (the fields the bridge uses and a few more).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Reservation {
    /// Reservation name.
    pub name: String,
    /// Reserved nodes as a host list.
    pub node_list: Option<String>,
    /// Node count.
    pub node_count: Option<i32>,
    /// Partition.
    pub partition: Option<String>,
    /// Start (Unix seconds).
    pub start_time: NoVal<u64>,
    /// End (Unix seconds).
    pub end_time: NoVal<u64>,
    /// Flags.
    #[serde(deserialize_with = "null_default")]
    pub flags: Vec<ReservationFlag>,
    /// Users allowed.
    pub users: Option<String>,
    /// Accounts allowed.
    pub accounts: Option<String>,
    /// Groups allowed.
    pub groups: Option<String>,
    /// Features.
    pub features: Option<String>,
    /// Licenses.
    pub licenses: Option<String>,
    /// TRES.
    pub tres: Option<String>,
}

/// Response of GET /reservations/.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub(crate) struct ReservationsResponse {
    #[serde(deserialize_with = "null_default")]
    pub reservations: Vec<Reservation>,
}
