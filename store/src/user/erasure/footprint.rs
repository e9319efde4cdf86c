//! Where one user's data is: every community holding a row attributed to them in a declared
//! table (their memberships included), with the rows per table, the media objects they uploaded
//! and the agents acting for them. Read-only; the declarations are read first and fail closed.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::QueryAs;
use sqlx::{FromRow, PgConnection, Postgres};
use uuid::Uuid;

use crate::catalog::tenant_tree::TenantRelation;
use crate::error::StoreResult;
use crate::user::data::{DeclaredTenantTable, UserDataDeclaration, declared_tenant_tables};
use crate::{Store, count_u64, quote_ident};

/// The table whose rows say who is a member today.
pub const MEMBERSHIPS_TABLE: &str = "buzz.memberships";
/// The table whose rows record media uploads.
pub const MEDIA_UPLOADS_TABLE: &str = "buzz.media_uploads";

/// One community holding data of the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundCommunity {
    /// The community.
    pub community_id: Uuid,
    /// Its host (`None` if the community row is gone but rows remain).
    pub host: Option<String>,
    /// The user's membership role there today (`None`: not a member, a former participant).
    pub member_role: Option<String>,
    /// The user's rows per declared table (every table declaring a column, zeros included).
    pub rows: BTreeMap<String, u64>,
    /// Distinct media objects the user uploaded there.
    pub media_objects: u64,
    /// The agents acting for the user there.
    pub agent_ids: Vec<Uuid>,
    /// Members there other than the user.
    pub other_members: u64,
}

/// The user's footprint across the tenant model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserFootprintScan {
    /// Every tenant table's declaration, sorted by table.
    pub declarations: Vec<UserDataDeclaration>,
    /// Every community holding data of the user, by community id.
    pub communities: Vec<FoundCommunity>,
}

/// The user's rows per community in one heap.
async fn rows_by_community(
    conn: &mut PgConnection,
    heap: &TenantRelation,
    column: &str,
    pubkey: &str,
) -> StoreResult<Vec<(Uuid, i64)>> {
    let sql = format!(
        "SELECT community_id, count(*) FROM ONLY {} WHERE {} = $1 GROUP BY community_id",
        heap.sql_name(),
        quote_ident(column)
    );
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(pubkey)
        .fetch_all(conn)
        .await?)
}

/// The user's rows in `community_id` in one heap.
pub(crate) async fn rows_in_heap(
    conn: &mut PgConnection,
    heap: &TenantRelation,
    column: &str,
    community_id: Uuid,
    pubkey: &str,
) -> StoreResult<u64> {
    let sql = format!(
        "SELECT count(*) FROM ONLY {} WHERE community_id = $1 AND {} = $2",
        heap.sql_name(),
        quote_ident(column)
    );
    let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(community_id)
        .bind(pubkey)
        .fetch_one(conn)
        .await?;
    Ok(count_u64(rows))
}

/// The declared tables that hold user data, with their column.
fn user_tables(
    declared: &[DeclaredTenantTable],
) -> impl Iterator<Item = (&DeclaredTenantTable, &str)> {
    declared.iter().filter_map(|d| {
        d.declaration
            .user_column
            .as_deref()
            .map(|column| (d, column))
    })
}

impl Store {
    /// Every community holding data of `pubkey` (or listed in `also`: communities where the
    /// user has keys but maybe no row), with the user's rows per declared table, media objects
    /// and agents. Fails closed with `CatalogError::UserDataUndeclared` naming every tenant table
    /// without a sound declaration before anything is counted.
    pub async fn user_footprint(
        &self,
        pubkey: &str,
        also: &BTreeSet<Uuid>,
    ) -> StoreResult<UserFootprintScan> {
        let mut tx = self.pool.begin().await?;
        // One snapshot for every count, so the tables agree with each other.
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *tx)
            .await?;
        let declared = declared_tenant_tables(&mut tx).await?;
        let mut per_community: BTreeMap<Uuid, BTreeMap<String, u64>> = BTreeMap::new();
        for (table, column) in user_tables(&declared) {
            for heap in table.table.heaps() {
                for (community, rows) in rows_by_community(&mut tx, heap, column, pubkey).await? {
                    let counted = per_community
                        .entry(community)
                        .or_default()
                        .entry(table.declaration.table.clone())
                        .or_default();
                    *counted = counted.saturating_add(count_u64(rows));
                }
            }
        }
        for community in also {
            per_community.entry(*community).or_default();
        }
        let ids: Vec<Uuid> = per_community.keys().copied().collect();
        let hosts: BTreeMap<Uuid, String> = by_community(
            &mut tx,
            true,
            sqlx::query_as("SELECT id, host FROM buzz.communities WHERE id = ANY($1)").bind(&ids),
        )
        .await?;
        let has = |name: &str| declared.iter().any(|d| d.declaration.table == name);
        let roles: BTreeMap<Uuid, String> = by_community(
            &mut tx,
            has(MEMBERSHIPS_TABLE),
            sqlx::query_as("SELECT community_id, role FROM buzz.memberships WHERE pubkey = $1")
                .bind(pubkey),
        )
        .await?;
        let others: BTreeMap<Uuid, i64> = by_community(
            &mut tx,
            has(MEMBERSHIPS_TABLE),
            sqlx::query_as(
                "SELECT community_id, count(*) FROM buzz.memberships \
                 WHERE community_id = ANY($1) AND pubkey <> $2 GROUP BY community_id",
            )
            .bind(&ids)
            .bind(pubkey),
        )
        .await?;
        let media: BTreeMap<Uuid, i64> = by_community(
            &mut tx,
            has(MEDIA_UPLOADS_TABLE),
            sqlx::query_as(
                "SELECT community_id, count(DISTINCT object_key) FROM buzz.media_uploads \
                 WHERE uploader_pubkey = $1 GROUP BY community_id",
            )
            .bind(pubkey),
        )
        .await?;
        let mut agents: BTreeMap<Uuid, Vec<Uuid>> = BTreeMap::new();
        if has(workflows::user::footprint::AGENTS_TABLE) {
            let rows: Vec<(Uuid, Uuid)> = sqlx::query_as(
                "SELECT community_id, id FROM buzz.agents WHERE pubkey = $1 ORDER BY community_id, id",
            )
            .bind(pubkey)
            .fetch_all(&mut *tx)
            .await?;
            for (community, agent) in rows {
                agents.entry(community).or_default().push(agent);
            }
        }
        tx.commit().await?;

        let all_user_tables: BTreeSet<String> = user_tables(&declared)
            .map(|(d, _)| d.declaration.table.clone())
            .collect();
        let communities = per_community
            .into_iter()
            .map(|(community_id, found)| {
                let mut rows: BTreeMap<String, u64> =
                    all_user_tables.iter().map(|t| (t.clone(), 0)).collect();
                rows.extend(found);
                FoundCommunity {
                    community_id,
                    host: hosts.get(&community_id).cloned(),
                    member_role: roles.get(&community_id).cloned(),
                    rows,
                    media_objects: media.get(&community_id).map_or(0, |n| count_u64(*n)),
                    agent_ids: agents.remove(&community_id).unwrap_or_default(),
                    other_members: others.get(&community_id).map_or(0, |n| count_u64(*n)),
                }
            })
            .collect();
        Ok(UserFootprintScan {
            declarations: declared.into_iter().map(|d| d.declaration).collect(),
            communities,
        })
    }

    /// The user's rows left in `community_id`, per declared table (zeros included): what the
    /// verification reads after the purge.
    pub async fn user_rows_left(
        &self,
        community_id: Uuid,
        pubkey: &str,
    ) -> StoreResult<BTreeMap<String, u64>> {
        let mut conn = self.pool.acquire().await?;
        let declared = declared_tenant_tables(&mut conn).await?;
        let mut left = BTreeMap::new();
        for (table, column) in user_tables(&declared) {
            let mut rows = 0u64;
            for heap in table.table.heaps() {
                rows = rows.saturating_add(
                    rows_in_heap(&mut conn, heap, column, community_id, pubkey).await?,
                );
            }
            left.insert(table.declaration.table.clone(), rows);
        }
        Ok(left)
    }

    /// Every community where `pubkey` has at least one row in a declared table: what the gate
    /// compares with the approved inventory once the user is fenced.
    pub async fn user_communities(&self, pubkey: &str) -> StoreResult<BTreeSet<Uuid>> {
        Ok(self
            .user_footprint(pubkey, &BTreeSet::new())
            .await?
            .communities
            .into_iter()
            .map(|c| c.community_id)
            .collect())
    }
}

impl Store {
    /// The agents acting for `pubkey` in `community_id`, by id.
    pub async fn user_agent_ids(&self, community_id: Uuid, pubkey: &str) -> StoreResult<Vec<Uuid>> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM buzz.agents WHERE community_id = $1 AND pubkey = $2 ORDER BY id",
        )
        .bind(community_id)
        .bind(pubkey)
        .fetch_all(&self.pool)
        .await?)
    }
}

/// A community the user owns, with the members it has besides them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedCommunity {
    /// The community.
    pub community_id: Uuid,
    /// Its host.
    pub host: Option<String>,
    /// Members other than the user.
    pub other_members: u64,
}

impl Store {
    /// The communities among `communities` that `pubkey` owns (membership role `owner`) today,
    /// with how many other members each has.
    pub async fn owned_communities(
        &self,
        pubkey: &str,
        communities: &[Uuid],
    ) -> StoreResult<Vec<OwnedCommunity>> {
        let rows: Vec<(Uuid, Option<String>, i64)> = sqlx::query_as(
            "SELECT m.community_id, c.host, \
                    (SELECT count(*) FROM buzz.memberships o \
                      WHERE o.community_id = m.community_id AND o.pubkey <> m.pubkey) \
             FROM buzz.memberships m LEFT JOIN buzz.communities c ON c.id = m.community_id \
             WHERE m.pubkey = $1 AND m.role = 'owner' AND m.community_id = ANY($2) \
             ORDER BY c.host, m.community_id",
        )
        .bind(pubkey)
        .bind(communities)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(community_id, host, others)| OwnedCommunity {
                community_id,
                host,
                other_members: count_u64(others),
            })
            .collect())
    }
}

/// The `(community_id, value)` pairs `query` returns, by community; empty, with `query` never
/// sent, when the table it reads is not `declared` (an undeclared table is not read).
async fn by_community<V>(
    conn: &mut PgConnection,
    declared: bool,
    query: QueryAs<'_, Postgres, (Uuid, V), PgArguments>,
) -> StoreResult<BTreeMap<Uuid, V>>
where
    (Uuid, V): for<'r> FromRow<'r, PgRow> + Send + Unpin,
    V: Send + Unpin,
{
    if !declared {
        return Ok(BTreeMap::new());
    }
    Ok(query.fetch_all(conn).await?.into_iter().collect())
}
