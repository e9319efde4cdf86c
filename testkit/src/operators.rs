//! Operator keys for the end-to-end tests: one ed25519 key per operator name, registered in the
//! operator registry as that name, so every test that names operators (`--requested-by alice`,
//! `--approved-by bob`) signs with a real key and the worker verifies real SSHSIG signatures.
//!
//! A name's key is derived from the name (a fixed seed), so every test process and every run
//! writes the same key file and registers the same fingerprint: registration is idempotent and
//! concurrent test processes agree. These keys are for tests only: anyone can derive them. The
//! files live under `target/e2e-operators/` (mode 0600, as ssh-keygen requires).

use std::collections::BTreeMap;
use std::path::PathBuf;

use activities::identity::{IdentityError, add_operator};
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use ssh_key::private::{Ed25519Keypair, PrivateKey};
use ssh_key::{HashAlg, LineEnding};
use starter::signing::{KeyArgs, SigningKey};
use tokio::sync::Mutex;
use uuid::Uuid;
use workflows::operator::{Action, Kind, SignedAction};

/// Flags that name the operator acting.
const NAME_FLAGS: [&str; 4] = [
    "--requested-by",
    "--approved-by",
    "--aborted-by",
    "--unblocked-by",
];

/// A registered test operator.
#[derive(Clone)]
pub struct TestOperator {
    /// The registered name.
    pub name: String,
    /// The private key file (what `--key` takes).
    pub key_path: PathBuf,
    /// The public key file.
    pub public_path: PathBuf,
    /// `SHA256:…`.
    pub fingerprint: String,
}

impl TestOperator {
    /// Signs a statement dated now (for store-level tests), as the CLI signs it.
    pub fn sign(
        &self,
        action: Action,
        kind: Kind,
        request_id: Uuid,
        target: &str,
        digest: Option<&str>,
    ) -> SignedAction {
        let signed_at = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        self.sign_at(action, kind, request_id, target, digest, &signed_at)
    }

    /// As [`Self::sign`], with an explicit `signed_at`: the CLI's own signing
    /// (`starter::signing`, `ssh-keygen -Y sign`) with this operator's key file.
    pub fn sign_at(
        &self,
        action: Action,
        kind: Kind,
        request_id: Uuid,
        target: &str,
        digest: Option<&str>,
        signed_at: &str,
    ) -> SignedAction {
        let key = KeyArgs {
            key: Some(self.key_path.clone()),
            signed_at: None,
        };
        SigningKey::from_args(&key)
            .and_then(|key| key.sign(action, kind, request_id, target, digest, Some(signed_at)))
            .unwrap_or_else(|e| panic!("signing as {}: {e}", self.name))
    }
}

fn keys_dir() -> PathBuf {
    crate::env::target_dir().join("e2e-operators")
}

/// The key file pair of `name`, written if missing (deterministic content).
fn key_of(name: &str) -> TestOperator {
    key_of_generation(name, 0)
}

/// Generation `generation` of `name`'s key: a later generation replaces a key that was revoked
/// in this database (say by `deploy/local/demo` registering its own `alice`).
fn key_of_generation(name: &str, generation: u32) -> TestOperator {
    let seed: [u8; 32] = Sha256::digest(format!(
        "buzz-deletion e2e operator key: {name}/{generation}"
    ))
    .into();
    let mut key = PrivateKey::from(Ed25519Keypair::from_seed(&seed));
    key.set_comment(format!("{name}@buzz-deletion-e2e"));
    let dir = keys_dir();
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let key_path = dir.join(format!("{name}.{generation}"));
    let public_path = dir.join(format!("{name}.{generation}.pub"));
    let private_text = key
        .to_openssh(LineEnding::LF)
        .unwrap_or_else(|e| panic!("encoding {name}'s key: {e}"));
    let public_text = key
        .public_key()
        .to_openssh()
        .unwrap_or_else(|e| panic!("encoding {name}'s public key: {e}"));
    write_atomically(&key_path, private_text.as_bytes());
    write_atomically(&public_path, format!("{public_text}\n").as_bytes());
    TestOperator {
        name: name.to_owned(),
        fingerprint: key.public_key().fingerprint(HashAlg::Sha256).to_string(),
        key_path,
        public_path,
    }
}

/// Writes `bytes` to `path` through a private temporary file and a rename.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) {
    let tmp = path.with_extension(format!("tmp-{}", Uuid::new_v4().simple()));
    crate::env::write_private_file(&tmp, bytes);
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The registered test operator `name` (lowercased): key written, registered (revoking any
/// other live key that holds the name in this test database).
pub async fn operator(name: &str) -> TestOperator {
    static REGISTERED: Mutex<BTreeMap<String, TestOperator>> = Mutex::const_new(BTreeMap::new());
    let name = name.trim().to_lowercase();
    let mut registered = REGISTERED.lock().await;
    if let Some(known) = registered.get(&name) {
        return known.clone();
    }
    // The registry is owner-only.
    let pool = crate::stack::owner_pool(1).await;
    let operator = operator_in(&pool, &name).await;
    pool.close().await;
    registered.insert(name, operator.clone());
    operator
}

/// The test operator `name` (lowercased), registered in the database of `pool` (an owner
/// connection; tests with a private database register there).
pub async fn operator_in(pool: &PgPool, name: &str) -> TestOperator {
    let name = name.trim().to_lowercase();
    for generation in 0..64 {
        let operator = key_of_generation(&name, generation);
        let public = std::fs::read_to_string(&operator.public_path)
            .unwrap_or_else(|e| panic!("{}: {e}", operator.public_path.display()));
        match add_operator(pool, &name, &public, true).await {
            Ok(_) => return operator,
            // Revoked here before: the next generation replaces it.
            Err(IdentityError::DuplicateKey { revoked: true, .. }) => {}
            Err(e) => panic!("registering e2e operator {name}: {e}"),
        }
    }
    panic!("64 generations of the e2e key of {name} were revoked in this database")
}

/// A registered operator no other test uses (for revocation tests): a random key.
pub async fn fresh_operator(tag: &str) -> TestOperator {
    let name = format!("{tag}-{}", &Uuid::new_v4().simple().to_string()[..12]);
    operator(&name).await
}

/// A key that is not registered (derived like the others, never added).
pub fn unregistered_operator(tag: &str) -> TestOperator {
    key_of(&format!("unregistered-{tag}-{}", Uuid::new_v4().simple()))
}

/// `args` with `--key` appended for the operator the command names, when it is a signed
/// command (`community`/`user` submit, approve, abort, unblock, `community sign …`) without a
/// `--key` of its own. The key is registered in the database of `owner_url` when given (a test
/// with a database of its own), else in the shared test database.
pub async fn with_operator_key(args: &[&str], owner_url: Option<&str>) -> Vec<String> {
    let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let signed = matches!(
        args,
        [
            "community" | "user",
            "submit" | "approve" | "abort" | "unblock",
            ..
        ] | ["community", "sign", ..]
    );
    if !signed || args.contains(&"--key") {
        return all;
    }
    let named = NAME_FLAGS.iter().find_map(|flag| {
        let at = args.iter().position(|a| a == flag)?;
        args.get(at + 1).map(|n| n.trim().to_lowercase())
    });
    let valid = |n: &String| {
        !n.is_empty()
            && n.len() <= 64
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._@-".contains(&b))
    };
    if let Some(name) = named.filter(valid) {
        let operator = match owner_url {
            Some(url) => {
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .connect(url)
                    .await
                    .unwrap_or_else(|e| panic!("PostgreSQL not reachable as the owner: {e}"));
                let operator = operator_in(&pool, &name).await;
                pool.close().await;
                operator
            }
            None => operator(&name).await,
        };
        all.push("--key".into());
        all.push(operator.key_path.display().to_string());
    }
    all
}
