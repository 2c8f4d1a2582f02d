//! Deleting what a tenant or a pipeline leaves on the broker: a deleted tenant's topics (every
//! topic under its prefix: sources, sinks, dead letters, changelogs) and consumer groups (every
//! group id under `weir-<tenant>-<tenant id>.`), a deleted pipeline's changelog topic and group.
//! Through the Admin API, with the server's own principal.

use std::time::Duration;

use rdkafka::types::RDKafkaErrorCode;

use crate::config::ClusterConfig;
use crate::kafka::Admin;

/// Longest a deletion waits for a consumer group to empty: a pipeline's static members
/// (KIP-345) stay in its group until their `session.timeout.ms` (45 s by default) passes after
/// they stopped, and a group with members cannot be deleted.
pub const GROUP_WAIT: Duration = Duration::from_secs(60);

/// The topics whose names start with `prefix`, sorted.
///
/// # Errors
/// When the cluster cannot be reached.
pub fn topics_under(cluster: &ClusterConfig, prefix: &str) -> anyhow::Result<Vec<String>> {
    topics_of(&admin(cluster)?, prefix)
}

fn topics_of(admin: &Admin, prefix: &str) -> anyhow::Result<Vec<String>> {
    let listed =
        admin.list_topics().map_err(|e| anyhow::anyhow!("cannot list the topics on {}: {e}", admin.brokers()))?;
    let mut under: Vec<String> = listed.into_iter().filter(|t| t.starts_with(prefix)).collect();
    under.sort();
    Ok(under)
}

/// Deletes every topic under `prefix` and every consumer group whose id starts with
/// `group_prefix`, and returns once the broker lists none of them, waiting at most
/// [`GROUP_WAIT`] for groups to empty.
///
/// # Errors
/// What is left and why, when the broker refuses, cannot be reached, or a group still has
/// members after [`GROUP_WAIT`].
pub async fn tenant(cluster: &ClusterConfig, prefix: &str, group_prefix: &str) -> anyhow::Result<()> {
    let admin = admin(cluster)?;
    let topics = topics_of(&admin, prefix)?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    admin.delete_topics(&names).await.map_err(|e| anyhow::anyhow!("cannot delete topics {names:?}: {e}"))?;
    let groups: Vec<String> = admin
        .list_groups()
        .map_err(|e| anyhow::anyhow!("cannot list the consumer groups: {e}"))?
        .into_iter()
        .filter(|g| g.starts_with(group_prefix))
        .collect();
    delete_groups(&admin, groups, GROUP_WAIT).await
}

/// Deletes a pipeline incarnation's `changelog` topic and consumer group `group`, waiting at
/// most [`GROUP_WAIT`] for the group to empty.
///
/// # Errors
/// As [`tenant`].
pub async fn pipeline(cluster: &ClusterConfig, changelog: &str, group: &str) -> anyhow::Result<()> {
    let admin = admin(cluster)?;
    admin.delete_topics(&[changelog]).await.map_err(|e| anyhow::anyhow!("cannot delete topic {changelog}: {e}"))?;
    delete_groups(&admin, vec![group.to_owned()], GROUP_WAIT).await
}

/// Deletes `groups`, again every half second while one still has members, for at most `wait`.
async fn delete_groups(admin: &Admin, mut groups: Vec<String>, wait: Duration) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    while !groups.is_empty() {
        let names: Vec<&str> = groups.iter().map(String::as_str).collect();
        let outcomes =
            admin.delete_groups(&names).await.map_err(|e| anyhow::anyhow!("cannot delete groups {names:?}: {e}"))?;
        let mut left = Vec::new();
        for (group, outcome) in outcomes {
            match outcome {
                Ok(()) => {}
                Err(RDKafkaErrorCode::NonEmptyGroup) if started.elapsed() < wait => left.push(group),
                Err(RDKafkaErrorCode::NonEmptyGroup) => anyhow::bail!(
                    "consumer group {group} still has members after {} s (a stopped pipeline's member stays for its \
                     session.timeout.ms): try again later",
                    wait.as_secs()
                ),
                Err(code) => anyhow::bail!("cannot delete consumer group {group}: {code}"),
            }
        }
        groups = left;
        if !groups.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}

fn admin(cluster: &ClusterConfig) -> anyhow::Result<Admin> {
    Admin::new(cluster, &Default::default()).map_err(|e| anyhow::anyhow!("cannot reach {cluster}: {e}"))
}
