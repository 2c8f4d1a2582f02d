//! Follows the registry topic, so that several `weir serve` nodes sharing it serve the same
//! tenants, transforms and pipelines: every node runs every pipeline whose desired state is
//! running, as one more member (instance `node_id`) of the pipeline's consumer group, which
//! shares the partitions among the nodes (KIP-345 static membership, KIP-447 fencing).
//!
//! Each node changes its own registry as it answers a request, and writes the change to the
//! topic first. The follower reads the topic every [`FOLLOW_INTERVAL`]; once it has read back
//! every write of this node, the topic holds all this node applied, in the order the broker
//! took the writes, so the registry it describes is the truth: the follower replaces the
//! node's registry with it at once (tokens, tenants, transforms) and has each pipeline that
//! differs start, restart or stop on a task of its own. Writes of other nodes thus reach this
//! one within about a second. The read decides each record in the topic's order
//! ([`super::admit`]: the first writer of a name, prefix, version or pipeline incarnation wins;
//! a deletion loses to a use written before it); otherwise two nodes that change one object at
//! once both end at the write the broker took last. The follower publishes the offset it
//! applied up to (`Server::applied`): a request answers once its record is applied and it can
//! see whether it won.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::registry::{Desired, Registry, component_path};
use super::store::Spool;
use super::{Server, spec};

/// How often the follower reads the registry topic.
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(500);

/// Follows the registry topic from offset `end` (where the start-up read stopped), with
/// `values` the last value of every key up to there, until the server closes.
///
/// # Errors
/// When the operating system refuses a thread.
pub(super) fn spawn(
    server: Arc<Server>,
    mut values: BTreeMap<String, Vec<u8>>,
    mut end: i64,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let runtime = tokio::runtime::Handle::current();
    forget_materialized(&mut values, &server.components, server.store.spool());
    std::thread::Builder::new().name("weir-registry".into()).spawn(move || {
        while !server.closing.load(Ordering::Relaxed) {
            // A request waiting for its write to be read back wakes it early.
            std::thread::park_timeout(FOLLOW_INTERVAL);
            match server.store.read_after(end, &mut values) {
                Ok(next) if next > end => end = next,
                Ok(_) => continue,
                Err(error) => {
                    tracing::warn!(%error, "cannot read the registry topic; trying again");
                    continue;
                }
            }
            match runtime.block_on(server.reconcile(&values, end)) {
                Ok(true) => {
                    server.applied.send_replace(end);
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::error!(%error, "cannot apply the registry topic's changes; trying again at its next change");
                }
            }
            forget_materialized(&mut values, &server.components, server.store.spool());
        }
    })
}

impl Server {
    /// Makes the registry the one `values` describe (the topic up to offset `end`) and has each
    /// pipeline that differs converge on its own task ([`Server::converge`]), so that a slow
    /// stop holds up neither the registry nor other pipelines. Does nothing while a write of
    /// this node is beyond `end`: the next read includes it. Returns whether it applied.
    async fn reconcile(self: &Arc<Self>, values: &BTreeMap<String, Vec<u8>>, end: i64) -> anyhow::Result<bool> {
        let mut registry = self.registry.lock().await;
        // Every request writes and updates the registry under its lock: holding it, no write of
        // this node is on its way in between.
        if self.store.last_written() >= end {
            return Ok(false);
        }
        let truth = Registry::load(values, &self.components, self.store.spool())?;
        // Each pipeline that differs, with the incarnation that ended, if one did.
        let mut changed: BTreeMap<(String, String), Option<spec::Derived>> = BTreeMap::new();
        for (tenant, entry) in &truth.tenants {
            let before = registry.tenants.get(tenant).filter(|old| old.tenant.id == entry.tenant.id);
            for (name, pipeline) in &entry.pipelines {
                if before.and_then(|old| old.pipelines.get(name)) != Some(pipeline) {
                    changed.insert((tenant.clone(), name.clone()), None);
                }
            }
        }
        for (tenant, entry) in &registry.tenants {
            let now = truth.tenants.get(tenant).filter(|new| new.tenant.id == entry.tenant.id);
            if now.is_none() {
                self.supervisor.forget_pool(&entry.tenant.id);
            }
            for (name, pipeline) in &entry.pipelines {
                // Deleted, or deleted and deployed again: that incarnation ended.
                if now.and_then(|now| now.pipelines.get(name)).is_none_or(|p| p.id != pipeline.id) {
                    let ended = spec::derived(&entry.tenant, name, &pipeline.id, &self.config);
                    changed.insert((tenant.clone(), name.clone()), Some(ended));
                }
            }
        }
        *registry = truth;
        drop(registry);
        for ((tenant, name), ended) in changed {
            let server = self.clone();
            tokio::spawn(async move { server.converge(&tenant, &name, ended).await });
        }
        Ok(true)
    }

    /// Brings pipeline `name` of `tenant` on this node to what the registry says now: running
    /// its current spec, stopped, or gone, having first forgotten the incarnation that `ended`
    /// (deleted, maybe deployed again: its run, metrics and state directory). Level-triggered
    /// (it reads the registry once it holds the pipeline's lock), so runs for successive
    /// changes may come in any order.
    async fn converge(&self, tenant: &str, name: &str, ended: Option<spec::Derived>) {
        let _turn = self.lock_pipeline(tenant, name).await;
        let qualified = spec::qualified_name(tenant, name);
        if let Some(ended) = ended
            && let Err(error) = self.end_incarnation(qualified.clone(), &ended).await
        {
            tracing::error!(pipeline = %qualified, %error, "cannot forget the deleted pipeline's run on this node");
        }
        let wanted = {
            let registry = self.registry.lock().await;
            match registry.tenants.get(tenant).and_then(|entry| Some((entry, entry.pipelines.get(name)?))) {
                None => None,
                Some((_, pipeline)) if pipeline.desired == Desired::Stopped => Some(None),
                Some((entry, pipeline)) => {
                    match spec::resolve(pipeline.spec.clone(), entry, name, &pipeline.id, &self.config) {
                        Ok((_, run)) => Some(Some((run, self.supervisor.pool(&entry.tenant)))),
                        Err(error) => {
                            tracing::error!(tenant, pipeline = name, field = %error.field, error = %error.message, "cannot start a pipeline deployed through another node");
                            return;
                        }
                    }
                }
            }
        };
        let done = match wanted {
            Some(Some((run, _))) if self.supervisor.runs(&run) => Ok(()),
            Some(Some((run, pool))) => {
                tracing::info!(pipeline = %qualified, "starting a pipeline deployed or changed through the registry");
                self.start_blocking(run, pool).await
            }
            stopped => {
                let remove = stopped.is_none();
                tracing::info!(pipeline = %qualified, remove, "stopping a pipeline stopped or deleted through the registry");
                self.stop_blocking(qualified.clone(), remove).await
            }
        };
        if let Err(error) = done {
            tracing::error!(pipeline = %qualified, %error, "cannot apply the registry's change to the pipeline");
        }
    }
}

/// Forgets the chunks of components already written to `components`: only chunks of a
/// component still to come stay in `spool`.
fn forget_materialized(values: &mut BTreeMap<String, Vec<u8>>, components: &std::path::Path, spool: &Spool) {
    values.retain(|key, _| match key.strip_prefix("blob/").and_then(|rest| rest.split_once('/')) {
        Some((sha256, _)) if component_path(components, sha256).exists() => {
            spool.remove(key);
            false
        }
        _ => true,
    });
}
