use super::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// A fresh empty directory under the system temp dir.
fn scratch_dir(label: &str) -> PathBuf {
    let suffix = hex::encode(random_bytes::<8>().unwrap());
    let dir = std::env::temp_dir().join(format!("certificate-{label}-{suffix}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn openssl(args: &[&str]) -> std::process::Output {
    let output = Command::new("/usr/bin/openssl")
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn pem_round_trips_keep_the_key() {
    let key = ReceiptSigningKey::generate().unwrap();
    let pem = key.to_pkcs8_pem().unwrap();
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
    let again = ReceiptSigningKey::from_pkcs8_pem(&pem).unwrap();
    assert_eq!(again.key_id(), key.key_id());
    let public_pem = key.public_key().to_spki_pem().unwrap();
    assert!(public_pem.starts_with("-----BEGIN PUBLIC KEY-----\n"));
    let public = ReceiptPublicKey::from_spki_pem(&public_pem).unwrap();
    assert_eq!(public, key.public_key());
    let signature = again.sign(b"message");
    public.verify(b"message", &signature).unwrap();
}

#[test]
fn key_id_is_prefix_of_sha256_of_the_raw_public_key() {
    let key = ReceiptSigningKey::generate().unwrap();
    let id = key.key_id();
    assert_eq!(id.len(), "ed25519:".len() + 16);
    assert!(id.starts_with("ed25519:"));
    let raw = key.public_key().0.to_bytes();
    assert_eq!(&id[8..], &sha256_hex(&raw)[..16]);
    assert_eq!(key.public_key().key_id(), id);
    assert_ne!(ReceiptSigningKey::generate().unwrap().key_id(), id);
}

#[test]
fn signatures_bind_message_and_key() {
    let key = ReceiptSigningKey::generate().unwrap();
    let other = ReceiptSigningKey::generate().unwrap();
    let signature = key.sign(b"receipt");
    assert_eq!(STANDARD.decode(&signature).unwrap().len(), 64);
    key.public_key().verify(b"receipt", &signature).unwrap();
    assert!(matches!(
        key.public_key().verify(b"receipt!", &signature),
        Err(KeyError::BadSignature { .. })
    ));
    let error = other
        .public_key()
        .verify(b"receipt", &signature)
        .unwrap_err();
    assert!(error.to_string().contains(&other.key_id()));
    assert!(matches!(
        key.public_key().verify(b"receipt", "not base64!"),
        Err(KeyError::MalformedSignature { .. })
    ));
    assert!(matches!(
        key.public_key()
            .verify(b"receipt", &STANDARD.encode([0u8; 63])),
        Err(KeyError::MalformedSignature { .. })
    ));
    // The S half of a signature pushed past the group order (a malleated signature) is refused.
    let mut bytes: [u8; 64] = STANDARD.decode(&signature).unwrap().try_into().unwrap();
    let order: [u8; 32] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde,
        0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ];
    let mut carry = 0u16;
    for i in 0..32 {
        let sum = u16::from(bytes[32 + i]) + u16::from(order[i]) + carry;
        bytes[32 + i] = (sum & 0xff) as u8;
        carry = sum >> 8;
    }
    assert!(
        key.public_key()
            .verify(b"receipt", &STANDARD.encode(bytes))
            .is_err()
    );
}

#[test]
fn openssl_keys_are_read_and_ours_are_read_by_openssl() {
    let dir = scratch_dir("openssl");
    let key_path = dir.join("ossl.key");
    let pub_path = dir.join("ossl.pub");
    let key_arg = key_path.to_str().unwrap();
    let pub_arg = pub_path.to_str().unwrap();
    openssl(&["genpkey", "-algorithm", "ed25519", "-out", key_arg]);
    openssl(&["pkey", "-in", key_arg, "-pubout", "-out", pub_arg]);
    let key = ReceiptSigningKey::read_file(&key_path).unwrap();
    let public = ReceiptPublicKey::read_file(&pub_path).unwrap();
    assert_eq!(key.public_key(), public);
    // Our PEM of an OpenSSL key is byte for byte what OpenSSL wrote.
    assert_eq!(
        key.to_pkcs8_pem().unwrap(),
        std::fs::read_to_string(&key_path).unwrap()
    );
    assert_eq!(
        public.to_spki_pem().unwrap(),
        std::fs::read_to_string(&pub_path).unwrap()
    );
    // An OpenSSL signature verifies with our code.
    let message_path = dir.join("message");
    std::fs::write(&message_path, b"signed by openssl").unwrap();
    let signature = openssl(&[
        "pkeyutl",
        "-sign",
        "-rawin",
        "-inkey",
        key_arg,
        "-in",
        message_path.to_str().unwrap(),
    ])
    .stdout;
    public
        .verify(b"signed by openssl", &STANDARD.encode(&signature))
        .unwrap();
    assert_eq!(
        STANDARD.encode(&signature),
        key.sign(b"signed by openssl"),
        "Ed25519 signatures are deterministic"
    );

    // Our files are read by OpenSSL, and its public key matches ours.
    let (ours_key, ours_pub, id) = write_key_pair(&dir, "ours").unwrap();
    let derived = openssl(&["pkey", "-in", ours_key.to_str().unwrap(), "-pubout"]).stdout;
    assert_eq!(
        String::from_utf8(derived).unwrap(),
        std::fs::read_to_string(&ours_pub).unwrap()
    );
    openssl(&[
        "pkey",
        "-pubin",
        "-in",
        ours_pub.to_str().unwrap(),
        "-noout",
    ]);
    assert_eq!(ReceiptPublicKey::read_file(&ours_pub).unwrap().key_id(), id);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn write_key_pair_writes_private_key_0600_and_refuses_to_overwrite() {
    let dir = scratch_dir("pair");
    let (key_path, pub_path, id) = write_key_pair(&dir, "receipts-2026").unwrap();
    assert_eq!(key_path, dir.join("receipts-2026.key"));
    assert_eq!(pub_path, dir.join("receipts-2026.pub"));
    let mode = std::fs::metadata(&key_path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let key = ReceiptSigningKey::read_file(&key_path).unwrap();
    assert_eq!(key.key_id(), id);
    assert_eq!(ReceiptPublicKey::read_file(&pub_path).unwrap().key_id(), id);
    let before = std::fs::read(&key_path).unwrap();

    let error = write_key_pair(&dir, "receipts-2026").unwrap_err();
    assert!(matches!(error, KeyError::AlreadyExists { .. }));
    assert!(error.to_string().contains("receipts-2026.key"));
    assert!(error.to_string().contains("refusing to overwrite"));
    assert_eq!(std::fs::read(&key_path).unwrap(), before);

    // Only the .pub exists: still refused, and no .key is written.
    std::fs::write(dir.join("half.pub"), b"x").unwrap();
    assert!(matches!(
        write_key_pair(&dir, "half"),
        Err(KeyError::AlreadyExists { .. })
    ));
    assert!(!dir.join("half.key").exists());

    for bad in ["", "../escape", "a/b", ".hidden"] {
        assert!(
            matches!(write_key_pair(&dir, bad), Err(KeyError::InvalidName { .. })),
            "{bad:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn file_errors_name_the_path_and_never_show_key_material() {
    let dir = scratch_dir("errors");
    let missing = dir.join("missing.key");
    let error = ReceiptSigningKey::read_file(&missing).unwrap_err();
    assert!(error.to_string().contains("missing.key"), "{error}");

    // A public key where a private key is expected, and the reverse.
    let key = ReceiptSigningKey::generate().unwrap();
    let private_pem = key.to_pkcs8_pem().unwrap();
    let public_pem = key.public_key().to_spki_pem().unwrap();
    let swapped = dir.join("swapped.key");
    std::fs::write(&swapped, &public_pem).unwrap();
    let error = ReceiptSigningKey::read_file(&swapped).unwrap_err();
    assert!(matches!(error, KeyError::InvalidPrivateKey { .. }));
    assert!(error.to_string().contains("swapped.key"));
    let swapped_pub = dir.join("swapped.pub");
    std::fs::write(&swapped_pub, &private_pem).unwrap();
    let error = ReceiptPublicKey::read_file(&swapped_pub).unwrap_err();
    assert!(matches!(error, KeyError::InvalidPublicKey { .. }));
    let message = error.to_string();
    assert!(message.contains("swapped.pub"));
    // No line of the private key's base64 body appears in the message.
    for line in private_pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
    {
        assert!(!message.contains(line));
    }
    assert!(!format!("{key:?}").contains(&private_pem));
    assert!(format!("{key:?}").contains(&key.key_id()));

    // An RSA key is not an Ed25519 key.
    let rsa = dir.join("rsa.key");
    openssl(&[
        "genpkey",
        "-algorithm",
        "rsa",
        "-pkeyopt",
        "rsa_keygen_bits:1024",
        "-out",
        rsa.to_str().unwrap(),
    ]);
    assert!(matches!(
        ReceiptSigningKey::read_file(&rsa),
        Err(KeyError::InvalidPrivateKey { .. })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn key_ring_finds_keys_by_id() {
    let old = ReceiptSigningKey::generate().unwrap();
    let new = ReceiptSigningKey::generate().unwrap();
    let ring = KeyRing::new(vec![old.public_key(), new.public_key(), new.public_key()]);
    let mut expected = vec![old.key_id(), new.key_id()];
    expected.sort();
    assert_eq!(ring.key_ids(), expected);
    assert_eq!(ring.get(&old.key_id()), Some(&old.public_key()));
    assert_eq!(ring.get("ed25519:0000000000000000"), None);
    assert!(KeyRing::new(vec![]).key_ids().is_empty());
}
