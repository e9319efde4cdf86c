//! A community deletion request driven step by step through the store's own calls, for tests
//! that change the catalog between steps (a partition attached after submit, a foreign key added
//! after approval).

use activities::store::{Community, FrozenInventory, Stage, Store, StoreResult};
use activities::taxonomy::tenant_prefixes;
use certificate::receipt::Receipt;
use workflows::community::contracts::PurgeReport;

use super::{APPROVER, Fixture, empty_prefix, media_manifest, register_and_claim};

/// Registers a request for `community` and claims it at `submitted`.
pub async fn submit(store: &Store, community: &Community) -> Fixture {
    register_and_claim(store, community, "catalog shape test").await
}

impl Fixture {
    /// Scans the catalog and freezes the inventory (the inventory activity's store calls).
    pub async fn take_inventory(&mut self) -> StoreResult<FrozenInventory> {
        let catalog = self.store.catalog_scan(self.community.id).await?;
        let prefixes = tenant_prefixes(self.community.id)
            .into_iter()
            .map(empty_prefix)
            .collect();
        let inventory = FrozenInventory::new(
            self.community.id,
            self.community.host.clone(),
            catalog,
            prefixes,
            0,
        );
        self.store.freeze_inventory(&self.token, &inventory).await?;
        Ok(inventory)
    }

    /// Records a second operator's approval of `inventory` and claims at `approved`.
    pub async fn approve(&mut self, inventory: &FrozenInventory) {
        self.store
            .record_approval(
                self.request_id,
                &self.signed_approval(APPROVER, &inventory.digest()).await,
                "store-test/approve",
            )
            .await
            .expect("approve");
        self.claim(&[Stage::Approved]).await;
    }

    /// The preflight's catalog check.
    pub async fn preflight(&self) -> StoreResult<()> {
        self.store.check_catalog_unchanged(&self.token).await
    }

    /// Quiesces, fences, binds an empty destructive manifest and records the bindings removed:
    /// claimed at `bindings_removed`, ready to purge.
    pub async fn fence_and_drain(&mut self) {
        self.store
            .begin_quiescing(&self.token)
            .await
            .expect("quiesce");
        self.store.fence(&self.token).await.expect("fence");
        self.claim(&[Stage::Fenced]).await;
        let summary = media_manifest(self.community.id, &[], 10);
        self.store
            .bind_destructive_manifest(&self.token, &summary)
            .await
            .expect("bind empty manifest");
        self.claim(&[Stage::Drained]).await;
        self.store
            .mark_bindings_removed(&self.token, serde_json::json!({ "deleted": 0 }))
            .await
            .expect("bindings removed");
        self.claim(&[Stage::BindingsRemoved]).await;
    }

    /// The row purge, in batches of `batch_rows`.
    pub async fn purge(&self, batch_rows: u32) -> StoreResult<PurgeReport> {
        self.store
            .purge_postgres(&self.token, batch_rows, |_, _| {})
            .await
    }

    /// After the row purge: claims `postgres_purged` and records the cache purged (the store's
    /// half of the cache purge, with no key to unlink); returns the token it ran under.
    pub async fn record_cache_purged(&mut self) -> activities::store::ExecToken {
        let token = self.claim(&[Stage::PostgresPurged]).await;
        self.advance(Stage::PostgresPurged, Stage::CachePurged)
            .await
            .expect("cache purged");
        token
    }

    /// Advances the request from `from` to `to` under the fixture's token, with empty facts.
    pub async fn advance(&self, from: Stage, to: Stage) -> StoreResult<()> {
        self.store
            .advance(&self.token, from, to, serde_json::json!({}))
            .await
    }

    /// From `postgres_purged` (claimed there): the cache purge and the verification advances with
    /// empty facts, as a worker that records no scope verification leaves the request at
    /// `logically_verified`.
    pub async fn advance_to_verified(&self) {
        for (from, to) in [
            (Stage::PostgresPurged, Stage::CachePurged),
            (Stage::CachePurged, Stage::LogicallyVerified),
        ] {
            self.advance(from, to).await.expect("advance");
        }
    }

    /// Asserts that the request's certificate, read through `store`, audits clean against the
    /// stack's receipt key.
    pub async fn assert_certificate_audits_clean(&self, store: &Store) {
        let ring = certificate::keys::KeyRing::new(vec![
            testkit::env::receipt_key().signing_key().public_key(),
        ]);
        let audit = store
            .audit_certificate(self.request_id, &ring)
            .await
            .expect("audit");
        assert!(audit.problems.is_empty(), "{:?}", audit.problems);
    }

    /// Completes the request through `signing` (a store holding the receipt key) and returns
    /// the receipt it signed.
    pub async fn complete_with_receipt(&self, signing: &Store) -> Receipt {
        signing
            .complete_with_receipt(&self.token, serde_json::json!({}))
            .await
            .expect("complete with its receipt");
        signing
            .certificate(self.request_id, None)
            .await
            .expect("certificate")
            .receipt
    }
}
