//! Text Slurm sends: host lists, core bitmaps, GRES index lists.

use crate::kit::{self, text};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use slurm_bridge::dra::parse_gres_index;
use slurm_bridge::resources::bitmap::{format_core_bitmap, parse_core_bitmap};
use slurm_rest::hostlist::{MAX_HOSTS, compress, expand};

/// Host names that compress to a host list and back (what slurmctld names nodes).
fn plain(h: &str) -> bool {
    !h.is_empty() && !h.contains(['[', ']', ',']) && !h.chars().any(char::is_whitespace)
}

fn hostlist(bytes: &[u8]) -> Result<(), TestCaseError> {
    let s = text(bytes);
    match expand(&s) {
        Ok(hosts) => {
            prop_assert!(hosts.len() <= MAX_HOSTS, "{} hosts", hosts.len());
            // Round trip: names -> compress -> expand gives the same names, in order.
            if hosts.len() <= 20_000 && hosts.iter().all(|h| plain(h)) {
                let list = compress(&hosts);
                let back = expand(&list)
                    .map_err(|e| TestCaseError::fail(format!("compress gave {list:?}: {e}")))?;
                prop_assert_eq!(back, hosts, "via {:?}", list);
            }
        }
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(msg.contains(&format!("{s:?}")), "{msg} does not name {s:?}");
        }
    }
    Ok(())
}

const HOSTLIST_DICT: &[&str] = &[
    "[",
    "]",
    ",",
    "-",
    " ",
    "0",
    "00",
    "1",
    "9",
    "007",
    "[1-3]",
    "[01-10,12]",
    "n",
    "node-",
    "[0-99999]",
    "18446744073709551615",
    "99999999999999999999",
    "[,]",
    "[-]",
    "\t",
    "é",
];

#[test]
fn hostlists() {
    kit::fuzz_bytes("hostlist", HOSTLIST_DICT, hostlist);
}

fn bitmap(bytes: &[u8]) -> Result<(), TestCaseError> {
    let s = text(bytes);
    match parse_core_bitmap(&s) {
        Ok(cores) => {
            let formatted = format_core_bitmap(&cores);
            prop_assert_eq!(
                parse_core_bitmap(&formatted).ok(),
                Some(cores),
                "via {}",
                formatted
            );
        }
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(msg.contains(&format!("{s:?}")), "{msg} does not name {s:?}");
        }
    }
    Ok(())
}

const HEX_DICT: &[&str] = &[
    "0x",
    "0X",
    "F",
    "f",
    "0",
    "1",
    "8",
    "FFFFFFFFFFFFFFFF",
    " ",
    "g",
    "-",
];

#[test]
fn core_bitmaps() {
    kit::fuzz_bytes("core_bitmap", HEX_DICT, bitmap);
}

fn gres_index(bytes: &[u8]) -> Result<(), TestCaseError> {
    let s = text(bytes);
    match parse_gres_index(&s) {
        Ok(idx) => {
            let distinct: std::collections::BTreeSet<_> = idx.iter().collect();
            prop_assert_eq!(distinct.len(), idx.len(), "repeats in {:?}", idx);
            prop_assert!(!idx.is_empty());
        }
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(msg.contains(&format!("{s:?}")), "{msg} does not name {s:?}");
        }
    }
    Ok(())
}

const GRES_DICT: &[&str] = &[
    "IDX:",
    "[",
    "]",
    ",",
    "-",
    "0",
    "1",
    "4294967295",
    "4294967296",
    " ",
];

#[test]
fn gres_indices() {
    kit::fuzz_bytes("gres_index", GRES_DICT, gres_index);
}
