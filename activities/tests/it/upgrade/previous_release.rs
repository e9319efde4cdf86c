//! Data as the previous release (migrations 0001–0015) writes it, in that release's schema: every
//! table of schemas `buzz` and `deletion` holds rows, each satisfying that release's constraints
//! and evidence triggers (signed approvals of a second operator, chained audit events, stamped
//! chunks, left stage rows). Written as SQL for that schema, not through today's store, whose
//! queries name columns the later migrations add.
//!
//! The stories behind the rows: community `T` deleted to the end (receipt, log leaf, archive
//! copy, purge counts); `M` in the middle of deleting its objects (fenced, irreversible, one chunk
//! stamped, one pending, one late chunk); `N` a neighbour with rows and a request awaiting
//! approval; `A` aborted and served again; user `U` being erased (gate passed, purge of `N`
//! running, a batch logged, media decisions taken, the user fenced); a `demo:` user request
//! completed; serving-write leases live, released and stalled; a taxonomy sweep; a revoked
//! operator key; a fleet-wide `schema_changed` event.

use certificate::chain::{EventContent, GENESIS_HASH, event_hash};
use chrono::{DateTime, Duration, TimeZone, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// The previous release's last migration.
pub const LAST_MIGRATION: i64 = 15;

// Communities (ids 0xa1–0xa4 in the SQL below): `T` deleted to the end, `N` a neighbour with a
// request awaiting approval, `M` in the middle of deleting its objects, `A` aborted.

/// Request: `T`, retention pending.
pub const R_T: Uuid = Uuid::from_u128(0xb1);
/// Request: `N`, inventoried (awaiting approval).
pub const R_N: Uuid = Uuid::from_u128(0xb2);
/// Request: `M`, drained and deleting (irreversible).
pub const R_M: Uuid = Uuid::from_u128(0xb3);
/// Request: `A`, aborted.
pub const R_A: Uuid = Uuid::from_u128(0xb4);
/// Request: user `U`, running.
pub const R_U: Uuid = Uuid::from_u128(0xc1);
/// Request: a `demo:` user, completed.
pub const R_D: Uuid = Uuid::from_u128(0xc2);

/// Every request, in the order the audit chains are written.
pub const REQUESTS: [Uuid; 6] = [R_T, R_N, R_M, R_A, R_U, R_D];

const SCHEMA_AND_ROWS: &str = r#"
INSERT INTO deletion.operators
    (fingerprint, name, public_key, algorithm, added_at, added_by, revoked_at, revoked_by, revoke_reason)
VALUES
    ('SHA256:aliceAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', 'alice',
     'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIALICEalicealicealicealicealicealicealice alice@ops',
     'ssh-ed25519', '2026-11-29 09:00:00+00', 'buzz', NULL, NULL, NULL),
    ('SHA256:bobBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB', 'bob',
     'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBOBbobbobbobbobbobbobbobbobbobbobbobbobbob bob@ops',
     'ssh-ed25519', '2026-11-29 09:01:00+00', 'buzz', NULL, NULL, NULL),
    ('SHA256:carolCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC', 'carol',
     'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICAROLcarolcarolcarolcarolcarolcarolcaro carol@ops',
     'ssh-ed25519', '2026-11-29 09:02:00+00', 'buzz', '2026-11-29 12:00:00+00', 'buzz',
     'laptop lost');

INSERT INTO buzz.communities (id, host, display_name, created_at) VALUES
    ('00000000-0000-0000-0000-0000000000a2', 'neighbour.example.org', 'Neighbour', '2026-11-01 08:00:00+00'),
    ('00000000-0000-0000-0000-0000000000a3', 'mid-deletion.example.org', 'Mid deletion', '2026-11-01 08:01:00+00'),
    ('00000000-0000-0000-0000-0000000000a4', 'aborted.example.org', 'Aborted', '2026-11-01 08:02:00+00');

INSERT INTO buzz.channels (id, community_id, name, topic, created_at)
SELECT md5(c::text || n)::uuid, c, 'channel-' || n, 'topic ' || n, '2026-11-02 10:00:00+00'::timestamptz + n * interval '1 minute'
  FROM unnest(ARRAY['00000000-0000-0000-0000-0000000000a2', '00000000-0000-0000-0000-0000000000a3',
                    '00000000-0000-0000-0000-0000000000a4']::uuid[]) AS c,
       generate_series(1, 2) AS n;

INSERT INTO buzz.events (id, community_id, channel_id, pubkey, kind, content, created_at)
SELECT md5('event' || c::text || n), c, md5(c::text || 1)::uuid,
       (ARRAY[repeat('a', 64), repeat('b', 64), repeat('c', 64)])[n], 1,
       'note ' || n || ' in ' || c, '2026-11-03 10:00:00.123456+00'::timestamptz + n * interval '1 second'
  FROM unnest(ARRAY['00000000-0000-0000-0000-0000000000a2', '00000000-0000-0000-0000-0000000000a3',
                    '00000000-0000-0000-0000-0000000000a4']::uuid[]) AS c,
       generate_series(1, 3) AS n;

INSERT INTO buzz.memberships (community_id, pubkey, role, joined_at)
SELECT c, p, CASE WHEN p = repeat('b', 64) THEN 'owner' ELSE 'member' END, '2026-11-02 09:00:00+00'
  FROM unnest(ARRAY['00000000-0000-0000-0000-0000000000a2', '00000000-0000-0000-0000-0000000000a3',
                    '00000000-0000-0000-0000-0000000000a4']::uuid[]) AS c,
       unnest(ARRAY[repeat('a', 64), repeat('b', 64)]) AS p;

INSERT INTO buzz.pubkey_allowlist (community_id, pubkey, added_by) VALUES
    ('00000000-0000-0000-0000-0000000000a2', repeat('a', 64), repeat('b', 64)),
    ('00000000-0000-0000-0000-0000000000a3', repeat('c', 64), repeat('b', 64));

INSERT INTO buzz.agents (id, community_id, pubkey, name, config) VALUES
    (md5('agent-n')::uuid, '00000000-0000-0000-0000-0000000000a2', repeat('a', 64), 'helper', '{"model": "small", "temperature": 0.5}'),
    (md5('agent-m')::uuid, '00000000-0000-0000-0000-0000000000a3', repeat('b', 64), 'archivist', '{}');

INSERT INTO buzz.media_uploads (id, community_id, sha256, object_key, bytes, uploaded_at, uploader_pubkey) VALUES
    (md5('upload-n1')::uuid, '00000000-0000-0000-0000-0000000000a2', repeat('1', 64),
     'media/00000000-0000-0000-0000-0000000000a2/' || repeat('1', 64), 1024, '2026-11-04 10:00:00+00', repeat('a', 64)),
    (md5('upload-n2')::uuid, '00000000-0000-0000-0000-0000000000a2', repeat('2', 64),
     'media/00000000-0000-0000-0000-0000000000a2/' || repeat('2', 64), 2048, '2026-11-04 10:01:00+00', repeat('b', 64)),
    (md5('upload-m1')::uuid, '00000000-0000-0000-0000-0000000000a3', repeat('3', 64),
     'media/00000000-0000-0000-0000-0000000000a3/' || repeat('3', 64), 4096, '2026-11-04 10:02:00+00', NULL);

-- The signatures every request and approval was made under.
INSERT INTO deletion.operator_signatures
    (fingerprint, nonce, action, kind, request_id, digest, statement, signature, signed_at, recorded_at, consumed_by)
SELECT CASE s.action WHEN 'submit' THEN 'SHA256:aliceAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'
                     ELSE 'SHA256:bobBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB' END,
       s.nonce, s.action, s.kind, s.request_id, s.digest,
       'buzz-deletion ' || s.action || ' ' || s.kind || ' ' || s.request_id || coalesce(' ' || s.digest, ''),
       E'-----BEGIN SSH SIGNATURE-----\nU1NIU0lHAAAAAQ' || s.nonce || E'\n-----END SSH SIGNATURE-----',
       '2026-11-30 09:00:00+00', '2026-11-30 09:00:01+00',
       'community-deletion-' || s.request_id || '/run-1/activity-1'
  FROM (VALUES
    ('submit', 'community', '00000000-0000-0000-0000-0000000000b1'::uuid, NULL, '000000000000000000000000000000b1'),
    ('approve', 'community', '00000000-0000-0000-0000-0000000000b1'::uuid, repeat('d1', 32), '100000000000000000000000000000b1'),
    ('submit', 'community', '00000000-0000-0000-0000-0000000000b2'::uuid, NULL, '000000000000000000000000000000b2'),
    ('submit', 'community', '00000000-0000-0000-0000-0000000000b3'::uuid, NULL, '000000000000000000000000000000b3'),
    ('approve', 'community', '00000000-0000-0000-0000-0000000000b3'::uuid, repeat('d3', 32), '100000000000000000000000000000b3'),
    ('submit', 'community', '00000000-0000-0000-0000-0000000000b4'::uuid, NULL, '000000000000000000000000000000b4'),
    ('abort', 'community', '00000000-0000-0000-0000-0000000000b4'::uuid, NULL, '200000000000000000000000000000b4'),
    ('submit', 'user', '00000000-0000-0000-0000-0000000000c1'::uuid, NULL, '000000000000000000000000000000c1'),
    ('approve', 'user', '00000000-0000-0000-0000-0000000000c1'::uuid, repeat('e1', 32), '100000000000000000000000000000c1'),
    ('submit', 'user', '00000000-0000-0000-0000-0000000000c2'::uuid, NULL, '000000000000000000000000000000c2'),
    ('approve', 'user', '00000000-0000-0000-0000-0000000000c2'::uuid, repeat('e2', 32), '100000000000000000000000000000c2')
  ) AS s(action, kind, request_id, digest, nonce);

INSERT INTO deletion.requests
    (id, kind, community_id, host, target, workflow_id, requested_by, reason, stage, inventory,
     inventory_digest, destructive_manifest, destructive_manifest_digest, exec_generation,
     fence_generation, irreversible_at, blocked_stage, blocked_reason, blocked_at, last_error,
     retry_count, next_attempt_at, created_at, updated_at, completed_at, requested_fingerprint,
     requested_nonce, owner_run_id)
VALUES
    ('00000000-0000-0000-0000-0000000000b1', 'community', '00000000-0000-0000-0000-0000000000a1',
     'deleted.example.org', NULL, 'community-deletion-00000000-0000-0000-0000-0000000000b1', 'alice',
     'tenant left', 'retention_pending',
     '{"version": 3, "host": "deleted.example.org", "catalog": {"tenant_tables": ["buzz.agents", "buzz.channels", "buzz.events", "buzz.media_uploads", "buzz.memberships", "buzz.pubkey_allowlist"], "row_counts": [{"table": "buzz.events", "rows": 3}]}, "prefixes": [{"prefix": "media/00000000-0000-0000-0000-0000000000a1/", "versions": 12, "bytes": 49152}]}',
     repeat('d1', 32), '{"chunks": 2, "versions": 12}', repeat('f1', 32), 9, 1,
     '2026-11-30 10:05:00.5+00', NULL, NULL, NULL, 'transient: S3 503 SlowDown', 1, NULL,
     '2026-11-30 10:00:00+00', '2026-11-30 10:09:00+00', '2026-11-30 10:09:00+00',
     'SHA256:aliceAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', '000000000000000000000000000000b1', NULL),
    ('00000000-0000-0000-0000-0000000000b2', 'community', '00000000-0000-0000-0000-0000000000a2',
     'neighbour.example.org', NULL, 'community-deletion-00000000-0000-0000-0000-0000000000b2', 'alice',
     NULL, 'inventoried', '{"version": 3, "host": "neighbour.example.org"}', repeat('d2', 32),
     NULL, NULL, 2, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL,
     '2026-11-30 11:00:00+00', '2026-11-30 11:00:02+00', NULL,
     'SHA256:aliceAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', '000000000000000000000000000000b2', NULL),
    ('00000000-0000-0000-0000-0000000000b3', 'community', '00000000-0000-0000-0000-0000000000a3',
     'mid-deletion.example.org', NULL, 'community-deletion-00000000-0000-0000-0000-0000000000b3',
     'alice', 'contract ended', 'drained', '{"version": 3, "host": "mid-deletion.example.org"}',
     repeat('d3', 32), '{"chunks": 2, "versions": 7}', repeat('f3', 32), 6, 1,
     '2026-11-30 12:10:00+00', NULL, NULL, NULL, NULL, 0, NULL,
     '2026-11-30 12:00:00+00', '2026-11-30 12:11:00+00', NULL,
     'SHA256:aliceAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', '000000000000000000000000000000b3', NULL),
    ('00000000-0000-0000-0000-0000000000b4', 'community', '00000000-0000-0000-0000-0000000000a4',
     'aborted.example.org', NULL, 'community-deletion-00000000-0000-0000-0000-0000000000b4', 'alice',
     NULL, 'aborted', '{"version": 3, "host": "aborted.example.org"}', repeat('d4', 32), NULL, NULL,
     3, 2, NULL, NULL, NULL, NULL, NULL, 0, NULL,
     '2026-11-30 13:00:00+00', '2026-11-30 13:05:00+00', '2026-11-30 13:05:00+00',
     'SHA256:aliceAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', '000000000000000000000000000000b4', NULL),
    ('00000000-0000-0000-0000-0000000000c1', 'user', NULL, NULL, 'user:' || repeat('a', 64),
     'user-deletion-00000000-0000-0000-0000-0000000000c1', 'alice', 'erasure request 7',
     'running', '{"version": 2, "target": "user:aaaa", "communities": []}', repeat('e1', 32), NULL,
     NULL, 4, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL,
     '2026-11-30 14:00:00+00', '2026-11-30 14:03:00+00', NULL,
     'SHA256:aliceAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', '000000000000000000000000000000c1',
     'user-deletion-00000000-0000-0000-0000-0000000000c1/run-2'),
    ('00000000-0000-0000-0000-0000000000c2', 'user', NULL, NULL, 'demo:upgrade',
     'user-deletion-00000000-0000-0000-0000-0000000000c2', 'alice', NULL, 'completed',
     '{"version": 1, "target": "demo:upgrade", "communities": ["b", "c"]}', repeat('e2', 32), NULL,
     NULL, 5, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL,
     '2026-11-30 15:00:00+00', '2026-11-30 15:04:00+00', '2026-11-30 15:04:00+00',
     'SHA256:aliceAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', '000000000000000000000000000000c2', NULL);

INSERT INTO deletion.approvals
    (request_id, approved_by, approved_at, inventory_digest, note, approved_fingerprint, approved_nonce)
VALUES
    ('00000000-0000-0000-0000-0000000000b1', 'bob', '2026-11-30 10:01:00+00', repeat('d1', 32), 'ticket 42',
     'SHA256:bobBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB', '100000000000000000000000000000b1'),
    ('00000000-0000-0000-0000-0000000000b3', 'bob', '2026-11-30 12:01:00+00', repeat('d3', 32), NULL,
     'SHA256:bobBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB', '100000000000000000000000000000b3'),
    ('00000000-0000-0000-0000-0000000000c1', 'bob', '2026-11-30 14:01:00+00', repeat('e1', 32), 'verified by support',
     'SHA256:bobBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB', '100000000000000000000000000000c1'),
    ('00000000-0000-0000-0000-0000000000c2', 'bob', '2026-11-30 15:01:00+00', repeat('e2', 32), NULL,
     'SHA256:bobBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB', '100000000000000000000000000000c2');

INSERT INTO deletion.checkpoints (request_id, stage, reached_at, exec_generation, detail)
SELECT '00000000-0000-0000-0000-0000000000b1', s.stage, '2026-11-30 10:00:00+00'::timestamptz + s.n * interval '40 seconds', s.n,
       jsonb_build_object('step', s.stage, 'n', s.n)
  FROM unnest(ARRAY['inventoried', 'approved', 'preflight', 'fenced', 'drained', 'bindings_removed',
                    'postgres_purged', 'cache_purged', 'logically_verified', 'retention_pending'])
       WITH ORDINALITY AS s(stage, n);
INSERT INTO deletion.checkpoints (request_id, stage, reached_at, exec_generation, detail) VALUES
    ('00000000-0000-0000-0000-0000000000b3', 'approved', '2026-11-30 12:01:00+00', 2, '{}'),
    ('00000000-0000-0000-0000-0000000000b3', 'fenced', '2026-11-30 12:05:00+00', 4, '{"fence_generation": 1}'),
    ('00000000-0000-0000-0000-0000000000b3', 'drained', '2026-11-30 12:09:00+00', 5, '{"chunks": 2}'),
    ('00000000-0000-0000-0000-0000000000b4', 'aborted', '2026-11-30 13:05:00+00', 3, '{"reason": "wrong host"}');

-- Chunks: T's all stamped; M's first stamped, second pending, one late chunk pending.
INSERT INTO deletion.manifest_chunks
    (request_id, chunk_no, prefix, entries, entry_count, exec_generation, deleted_at, deleted_versions,
     stamp_generation, late_at, late_digest)
VALUES
    ('00000000-0000-0000-0000-0000000000b1', 0, 'media/00000000-0000-0000-0000-0000000000a1/',
     '["media/00000000-0000-0000-0000-0000000000a1/1111 v1 object", "media/00000000-0000-0000-0000-0000000000a1/2222 v1 object"]',
     2, 5, '2026-11-30 10:05:01+00', 2, 6, NULL, NULL),
    ('00000000-0000-0000-0000-0000000000b1', 1, 'thumbs/00000000-0000-0000-0000-0000000000a1/',
     '["thumbs/00000000-0000-0000-0000-0000000000a1/1111.webp v1 object"]',
     1, 5, '2026-11-30 10:05:02+00', 1, 6, NULL, NULL),
    ('00000000-0000-0000-0000-0000000000b3', 0, 'media/00000000-0000-0000-0000-0000000000a3/',
     '["media/00000000-0000-0000-0000-0000000000a3/3333 v1 object", "media/00000000-0000-0000-0000-0000000000a3/3333 v2 delete_marker"]',
     2, 5, '2026-11-30 12:10:01+00', 2, 6, NULL, NULL),
    ('00000000-0000-0000-0000-0000000000b3', 1, 'media/00000000-0000-0000-0000-0000000000a3/',
     '["media/00000000-0000-0000-0000-0000000000a3/4444 v1 object"]', 1, 5, NULL, NULL, NULL, NULL, NULL),
    ('00000000-0000-0000-0000-0000000000b3', 2, 'media/00000000-0000-0000-0000-0000000000a3/',
     '["media/00000000-0000-0000-0000-0000000000a3/5555 v1 object"]', 1, 6, NULL, NULL, NULL,
     '2026-11-30 12:10:30+00', repeat('aa', 32));

INSERT INTO deletion.purge_progress (request_id, table_name, rows_deleted, updated_at)
SELECT '00000000-0000-0000-0000-0000000000b1', t, n, '2026-11-30 10:06:00+00'
  FROM unnest(ARRAY['buzz.agents', 'buzz.channels', 'buzz.events', 'buzz.media_uploads', 'buzz.memberships',
                    'buzz.pubkey_allowlist', 'buzz.communities'], ARRAY[1, 2, 3, 2, 2, 1, 1]) AS p(t, n);

INSERT INTO deletion.receipts (request_id, kind, key_id, signed, receipt_digest, created_at) VALUES
    ('00000000-0000-0000-0000-0000000000b1', 'community', 'ed25519:' || repeat('0f', 8),
     '{"receipt": {"request_id": "00000000-0000-0000-0000-0000000000b1", "kind": "community"}, "signature": "c2lnbmF0dXJl"}',
     repeat('71', 32), '2026-11-30 10:09:00+00'),
    ('00000000-0000-0000-0000-0000000000c2', 'user', 'ed25519:' || repeat('0f', 8),
     '{"receipt": {"request_id": "00000000-0000-0000-0000-0000000000c2", "kind": "user"}, "signature": "c2lnbmF0dXJl"}',
     repeat('72', 32), '2026-11-30 15:04:00+00');
INSERT INTO deletion.transparency_log (leaf_index, receipt_digest, request_id, appended_at) VALUES
    (0, repeat('71', 32), '00000000-0000-0000-0000-0000000000b1', '2026-11-30 10:09:00+00'),
    (1, repeat('72', 32), '00000000-0000-0000-0000-0000000000c2', '2026-11-30 15:04:00+00');
INSERT INTO deletion.log_checkpoints (tree_size, root_hash, checkpoint, created_at) VALUES
    (1, repeat('81', 32), '{"tree_size": 1, "signature": "Y2hlY2twb2ludA=="}', '2026-11-30 10:09:00+00'),
    (2, repeat('82', 32), '{"tree_size": 2, "signature": "Y2hlY2twb2ludA=="}', '2026-11-30 15:04:00+00');
INSERT INTO deletion.receipt_archives (request_id, bucket, object_key, version_id, retain_until, archived_at) VALUES
    ('00000000-0000-0000-0000-0000000000b1', 'buzz-receipts', 'receipts/00000000-0000-0000-0000-0000000000b1.json',
     'v-0001', '2033-11-30 10:09:00+00', '2026-11-30 10:09:01+00');

-- Fences: T and M fenced by their requests, A served again after its abort, N never fenced.
INSERT INTO deletion.community_fences (community_id, state, generation, request_id, updated_at) VALUES
    ('00000000-0000-0000-0000-0000000000a1', 'fenced', 1, '00000000-0000-0000-0000-0000000000b1', '2026-11-30 10:03:00+00'),
    ('00000000-0000-0000-0000-0000000000a3', 'fenced', 1, '00000000-0000-0000-0000-0000000000b3', '2026-11-30 12:05:00+00'),
    ('00000000-0000-0000-0000-0000000000a4', 'serving', 2, '00000000-0000-0000-0000-0000000000b4', '2026-11-30 13:05:00+00')
-- (the first write of a community's rows created its fence row, serving)
ON CONFLICT (community_id) DO UPDATE
   SET state = excluded.state, generation = excluded.generation, request_id = excluded.request_id,
       updated_at = excluded.updated_at;
-- User a…a fenced by its erasure (the row was created serving by the first write naming them).
UPDATE deletion.user_fences
   SET state = 'fenced', generation = 2, request_id = '00000000-0000-0000-0000-0000000000c1',
       updated_at = '2026-11-30 14:02:00+00'
 WHERE pubkey = repeat('a', 64);

INSERT INTO deletion.serving_write_leases
    (id, community_id, operation, owner, fence_generation, acquired_at, renewed_at, expires_at, released_at, user_pubkey)
VALUES
    (md5('lease-live')::uuid, '00000000-0000-0000-0000-0000000000a2', 'media.put', 'relay-0:41', 0,
     '2026-11-30 16:00:00+00', '2026-11-30 16:00:10+00', '2126-11-30 16:01:10+00', NULL, NULL),
    (md5('lease-released')::uuid, '00000000-0000-0000-0000-0000000000a2', 'redis.write', 'relay-1:7', 0,
     '2026-11-30 16:00:00+00', '2026-11-30 16:00:00+00', '2026-11-30 16:01:00+00', '2026-11-30 16:00:01+00', NULL),
    (md5('lease-stalled')::uuid, '00000000-0000-0000-0000-0000000000a3', 'push.send', 'relay-2:9', 0,
     '2026-11-30 11:59:00+00', '2026-11-30 11:59:00+00', '2026-11-30 12:00:00+00', NULL, NULL),
    (md5('lease-user')::uuid, '00000000-0000-0000-0000-0000000000a2', 'media.put', 'relay-0:42', 0,
     '2026-11-30 13:59:00+00', '2026-11-30 13:59:00+00', '2026-11-30 14:00:00+00', '2026-11-30 13:59:30+00',
     repeat('a', 64));

INSERT INTO deletion.taxonomy_sweeps
    (id, started_at, finished_at, object_cap, listed_objects, unknown_object_count, unknown_key_sample, reached_cap)
VALUES (md5('sweep')::uuid, '2026-11-29 02:00:00+00', '2026-11-29 02:03:00+00', 10000000, 5321, 1,
        '["uploads/tmp/leftover.bin"]', false);

-- User a…a: gate passed (left with its decision), the purge of N running.
INSERT INTO deletion.user_stage_history
    (id, request_id, stage, community_id, status, is_current, attempt, exec_generation, executor_id,
     created_at, first_started_at, started_at, finished_at, inputs, result, transition, previous_stage_id,
     last_error, handler_run_token)
VALUES
    ('00000000-0000-0000-0000-0000000000d1', '00000000-0000-0000-0000-0000000000c1', 'gate_user', NULL,
     'completed', false, 1, 2, 'worker-a', '2026-11-30 14:01:30+00', '2026-11-30 14:01:31+00',
     '2026-11-30 14:01:31+00', '2026-11-30 14:02:00+00', '{"target": "user:aaaa", "inventory_version": 2}',
     '{"fenced": true}', '{"decision": "enter_communities", "community_id": null}', NULL, NULL,
     'user-deletion-00000000-0000-0000-0000-0000000000c1/run-1'),
    ('00000000-0000-0000-0000-0000000000d2', '00000000-0000-0000-0000-0000000000c1', 'purge_db',
     '00000000-0000-0000-0000-0000000000a2', 'running', true, 2, 4, 'worker-b', '2026-11-30 14:02:00+00',
     '2026-11-30 14:02:01+00', '2026-11-30 14:03:00+00', NULL,
     '{"target": "user:aaaa", "community_id": "00000000-0000-0000-0000-0000000000a2", "role": "participant"}',
     NULL, NULL, '00000000-0000-0000-0000-0000000000d1', NULL,
     'user-deletion-00000000-0000-0000-0000-0000000000c1/run-2');
-- The demo request: gate, B's purge_db and purge_agents, C's purge_db (no agents), completed.
INSERT INTO deletion.user_stage_history
    (id, request_id, stage, community_id, status, is_current, attempt, exec_generation, executor_id,
     created_at, first_started_at, started_at, finished_at, inputs, result, transition, previous_stage_id)
VALUES
    ('00000000-0000-0000-0000-0000000000e1', '00000000-0000-0000-0000-0000000000c2', 'gate_user', NULL,
     'completed', false, 1, 2, NULL, '2026-11-30 15:01:10+00', '2026-11-30 15:01:11+00',
     '2026-11-30 15:01:11+00', '2026-11-30 15:01:12+00', '{"target": "demo:upgrade"}', '{}',
     '{"decision": "enter_communities"}', NULL),
    ('00000000-0000-0000-0000-0000000000e2', '00000000-0000-0000-0000-0000000000c2', 'purge_db',
     '00000000-0000-0000-0000-00000000000b', 'completed', false, 2, 3, NULL, '2026-11-30 15:01:12+00',
     '2026-11-30 15:01:13+00', '2026-11-30 15:01:43+00', '2026-11-30 15:01:44+00', '{"role": "participant"}',
     '{"has_agents": true}', '{"decision": "purge_agents"}', '00000000-0000-0000-0000-0000000000e1'),
    ('00000000-0000-0000-0000-0000000000e3', '00000000-0000-0000-0000-0000000000c2', 'purge_agents',
     '00000000-0000-0000-0000-00000000000b', 'completed', false, 1, 4, NULL, '2026-11-30 15:01:44+00',
     '2026-11-30 15:01:45+00', '2026-11-30 15:01:45+00', '2026-11-30 15:01:46+00', '{"role": "participant"}',
     '{}', '{"decision": "community_complete"}', '00000000-0000-0000-0000-0000000000e2'),
    ('00000000-0000-0000-0000-0000000000e4', '00000000-0000-0000-0000-0000000000c2', 'purge_db',
     '00000000-0000-0000-0000-00000000000c', 'completed', false, 1, 5, NULL, '2026-11-30 15:01:46+00',
     '2026-11-30 15:01:47+00', '2026-11-30 15:01:47+00', '2026-11-30 15:01:48+00',
     '{"role": "former_participant"}', '{"has_agents": false}', '{"decision": "community_complete"}',
     '00000000-0000-0000-0000-0000000000e3');

INSERT INTO deletion.user_purge_log (request_id, stage_id, community_id, what, subject, removed, exec_generation, at) VALUES
    ('00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000d2',
     '00000000-0000-0000-0000-0000000000a2', 'rows', 'buzz.pubkey_allowlist', 1, 4, '2026-11-30 14:03:01+00'),
    ('00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000d2',
     '00000000-0000-0000-0000-0000000000a2', 'object_versions', 'media/00000000-0000-0000-0000-0000000000a2/' || repeat('1', 64),
     2, 4, '2026-11-30 14:03:02+00');

INSERT INTO deletion.user_media_decisions
    (request_id, community_id, object_key, decision, other_references, user_references, versions,
     exec_generation, decided_at, deleted_at, deleted_versions)
VALUES
    ('00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000a2',
     'media/00000000-0000-0000-0000-0000000000a2/' || repeat('1', 64), 'delete', 0, 1,
     '[{"version_id": "v1", "kind": "object"}, {"version_id": "v2", "kind": "object"}]', 4,
     '2026-11-30 14:02:30+00', '2026-11-30 14:03:02+00', 2),
    ('00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000a2',
     'media/00000000-0000-0000-0000-0000000000a2/' || repeat('2', 64), 'keep_shared', 1, 1, '[]', 4,
     '2026-11-30 14:02:31+00', NULL, NULL);

-- A fleet-wide event (no request, not chained), as the owner's DDL audit writes them.
INSERT INTO deletion.audit_events (request_id, at, actor, event, detail) VALUES
    (NULL, '2026-11-29 08:00:00+00', 'buzz', 'schema_changed',
     '{"command": "CREATE TABLE", "statement": "CREATE TABLE buzz.extra (community_id uuid)"}');
"#;

/// The audit events of each request, in order: (actor, event, detail).
fn events(request: Uuid) -> Vec<(&'static str, &'static str, serde_json::Value)> {
    use serde_json::json;
    let submitted = ("alice", "submitted", json!({"reason": "as recorded"}));
    match request {
        R_T => vec![
            submitted,
            ("worker", "inventoried", json!({"digest": "d1".repeat(32)})),
            ("bob", "approved", json!({"note": "ticket 42"})),
            ("worker", "quiescing", json!({})),
            ("worker", "fenced", json!({"fence_generation": 1})),
            (
                "worker",
                "irreversible",
                json!({"at": "2026-11-30T10:05:00.5Z"}),
            ),
            (
                "worker",
                "chunk_stamped",
                json!({"chunk_no": 0, "deleted": 2, "already_missing": 0}),
            ),
            (
                "worker",
                "chunk_stamped",
                json!({"chunk_no": 1, "deleted": 1, "already_missing": 0}),
            ),
            (
                "worker",
                "retention_pending",
                json!({"receipt": "71".repeat(32)}),
            ),
        ],
        R_N => vec![
            submitted,
            ("worker", "inventoried", json!({"digest": "d2".repeat(32)})),
        ],
        R_M => vec![
            submitted,
            ("bob", "approved", json!({})),
            ("worker", "fenced", json!({"fence_generation": 1})),
            (
                "worker",
                "chunk_stamped",
                json!({"chunk_no": 0, "deleted": 2, "already_missing": 0}),
            ),
        ],
        R_A => vec![
            submitted,
            (
                "bob",
                "aborted",
                json!({"reason": "wrong host", "fence_generation": 2}),
            ),
        ],
        R_U => vec![
            submitted,
            ("bob", "approved", json!({"note": "verified by support"})),
            ("worker", "user_fenced", json!({"generation": 2})),
            (
                "worker",
                "purge_batch",
                json!({"table": "buzz.pubkey_allowlist", "rows": 1}),
            ),
        ],
        _ => vec![
            submitted,
            ("bob", "approved", json!({})),
            ("worker", "completed", json!({"stages": 4})),
        ],
    }
}

/// Writes every row of the previous release's data into `pool` (migrated to
/// [`LAST_MIGRATION`], connected as the schema owner).
pub async fn write(pool: &PgPool) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(SCHEMA_AND_ROWS))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("writing the previous release's rows: {e}"));
    let start = Utc
        .with_ymd_and_hms(2026, 11, 30, 10, 0, 0)
        .single()
        .unwrap_or_else(|| panic!("a valid time"));
    for (r, request) in REQUESTS.iter().enumerate() {
        let mut prev = GENESIS_HASH.to_owned();
        for (i, (actor, event, detail)) in events(*request).into_iter().enumerate() {
            let seq = i64::try_from(i).unwrap_or(0) + 1;
            let at: DateTime<Utc> = start
                + Duration::hours(i64::try_from(r).unwrap_or(0))
                + Duration::microseconds(seq * 1_000_123);
            let row_hash = event_hash(&EventContent {
                request_id: *request,
                seq,
                at,
                actor,
                event,
                detail: &detail,
                prev_hash: &prev,
            })
            .unwrap_or_else(|e| panic!("hash of {event}: {e}"));
            sqlx::query(
                "INSERT INTO deletion.audit_events \
                 (request_id, at, actor, event, detail, seq, prev_hash, row_hash) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(request)
            .bind(at)
            .bind(actor)
            .bind(event)
            .bind(sqlx::types::Json(&detail))
            .bind(seq)
            .bind(&prev)
            .bind(&row_hash)
            .execute(pool)
            .await
            .unwrap_or_else(|e| panic!("audit event {seq} of {request}: {e}"));
            prev = row_hash;
        }
    }
}
