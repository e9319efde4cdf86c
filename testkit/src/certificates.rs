//! A request's deletion certificate as an auditor gets it: exported through the CLI, then
//! verified offline with the stack's receipt public key.

use std::path::PathBuf;

use certificate::keys::{KeyRing, ReceiptPublicKey};
use certificate::verify::verify_certificate;
use serde_json::Value;

use crate::cli::Cli;
use crate::env::required;

/// Exports request `id`'s certificate (`kind`: `community` or `user`), verifies it offline with
/// `BUZZ_RECEIPT_PUBLIC_KEY_FILE` (panicking with every problem otherwise) and returns its
/// receipt.
pub async fn verified_receipt(cli: &Cli, kind: &str, id: &str) -> Value {
    let out = std::env::temp_dir().join(format!("certificate-{id}.json"));
    cli.run(&[kind, "certificate", id, "--out", &out.display().to_string()])
        .await
        .expect_code(0);
    let text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_file(&out);
    let certificate: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let key = ReceiptPublicKey::read_file(&PathBuf::from(required("BUZZ_RECEIPT_PUBLIC_KEY_FILE")))
        .unwrap_or_else(|e| panic!("{e}"));
    if let Err(problems) = verify_certificate(&certificate, &KeyRing::new(vec![key]), None) {
        panic!("the certificate of {id} must verify: {problems:?}");
    }
    certificate["receipt"].clone()
}
