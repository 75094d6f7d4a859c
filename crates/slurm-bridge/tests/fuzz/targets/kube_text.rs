//! Text Kubernetes users write: quantities; the `admin_comment` a Slurm job carries.

use crate::kit::{self, text};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use slurm_bridge::resources::quantity::Quantity;
use slurm_bridge::workload::admin_comment::AdminComment;

fn quantity(bytes: &[u8]) -> Result<(), TestCaseError> {
    let s = text(bytes);
    match Quantity::parse(&s) {
        Ok(q) => {
            // Display is exact: it parses back to the same value.
            let shown = q.to_string();
            prop_assert_eq!(Quantity::parse(&shown).ok(), Some(q), "via {}", shown);
            let _ = (
                q.ceil_units(),
                q.ceil_milli(),
                q.as_integer(),
                q.saturating_add(q),
            );
        }
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(msg.contains(&format!("{s:?}")), "{msg} does not name {s:?}");
        }
    }
    Ok(())
}

const QUANTITY_DICT: &[&str] = &[
    "-",
    "+",
    ".",
    "0",
    "1",
    "9",
    "m",
    "n",
    "u",
    "k",
    "K",
    "M",
    "G",
    "Ki",
    "Mi",
    "Gi",
    "Ei",
    "E",
    "e",
    "e3",
    "e-3",
    "e+",
    "e999",
    "E-99",
    "999999999999999999",
    "i",
    " ",
    "1.5",
];

#[test]
fn quantities() {
    kit::fuzz_bytes("quantity", QUANTITY_DICT, quantity);
}

fn admin_comment(bytes: &[u8]) -> Result<(), TestCaseError> {
    let s = text(bytes);
    if let Ok(c) = AdminComment::decode(&s) {
        // What decodes encodes to text that decodes to the same comment.
        let again = AdminComment::decode(&c.encode());
        prop_assert_eq!(again.as_ref().ok(), Some(&c));
        prop_assert!(c.uids.is_empty() || c.uids.len() == c.pods.len());
        let _ = c.pod_names().count();
    }
    Ok(())
}

const JSON_DICT: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\"pods\"",
    "\"group\"",
    "\"uids\"",
    "null",
    "true",
    "1",
    "\"ns/p\"",
    "\\u0000",
    "\\",
    "{\"pods\":[",
    "]}",
    " ",
];

#[test]
fn admin_comments() {
    kit::fuzz_bytes("admin_comment", JSON_DICT, admin_comment);
}
