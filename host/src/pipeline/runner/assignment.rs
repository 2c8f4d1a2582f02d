//! The consumer group's assignment: partitions revoked (their epoch committed first), lost
//! (the epoch aborted) and assigned (recovered, given tasks, and read from their restored
//! positions), and the checks that keep the group's view and the pipeline's together.

use std::collections::BTreeMap;
use std::time::Instant;

use super::Runner;
use crate::checkpoint::recovery::{self, RecoverOptions, Recovered};
use crate::checkpoint::restore::{self, LostChangelog};
use crate::checkpoint::savepoint::{self, Savepoint};
use crate::config::StartPosition;
use crate::error::PipelineError;
use crate::kafka::Rebalance;
use crate::pipeline::task::Task;
use crate::types::TaskId;

impl<'a> Runner<'a> {
    /// Applies a change of the group's assignment (see [`crate::kafka::Rebalance`]).
    ///
    /// Revoked partitions: the open epoch commits first (the group's generation still names
    /// this process as their owner, and the next owner's stable offset fetch waits for the
    /// commit), then their tasks are dropped and the partitions given up, so no later
    /// transaction carries them. Lost partitions: the group already gave them to another member,
    /// and the open epoch holds their work, so nothing may commit: the runner fails into
    /// recovery, which aborts the epoch and rejoins.
    ///
    /// Assigned partitions: recovered ([`recovery::recover_tasks`]), given tasks, and read from
    /// their restored positions; positions that are new are committed at once.
    ///
    /// # Errors
    /// [`PipelineError::AssignmentLost`] for lost partitions; any error of a checkpoint or of
    /// recovery.
    pub(super) fn rebalance(&mut self, event: Rebalance) -> Result<(), PipelineError> {
        match event {
            Rebalance::Revoke { tasks, lost: true } => {
                tracing::warn!(
                    partitions = tasks.len(),
                    "the consumer group gave this process's partitions to another member; aborting the open epoch"
                );
                Err(PipelineError::AssignmentLost(tasks.len()))
            }
            Rebalance::Revoke { tasks, lost: false } => self.revoke(&tasks),
            Rebalance::Assign(tasks) => self.assign(tasks),
        }
    }

    /// Rejoins the group when source partitions have no owner at two checks in a row (one
    /// `source.partition_discovery_interval_ms` apart): a static member that came back kept its
    /// old assignment, so partitions added meanwhile were never assigned ([`Source::rejoin`]).
    /// Partitions added while the group runs are found by the members' own metadata refreshes,
    /// which rebalance the group before the second check.
    pub(super) fn check_ownership(&mut self) -> Result<(), PipelineError> {
        self.last_ownership_check = Instant::now();
        if self.source.generation() < 0 {
            return Ok(()); // not a member yet (or between two generations): nothing to compare
        }
        let all = self.source_tasks()?;
        let unowned = match self.source.owners(self.config.checkpoint.timeout) {
            Ok(owners) => {
                owners.map_or_else(Vec::new, |owners| all.into_iter().filter(|t| !owners.contains_key(t)).collect())
            }
            Err(error) => {
                tracing::debug!(%error, "cannot describe the consumer group; its ownership is checked again later");
                Vec::new()
            }
        };
        if unowned.iter().any(|t| self.unowned.contains(t)) {
            tracing::info!(partitions = ?unowned.iter().map(ToString::to_string).collect::<Vec<_>>(), "source partitions without an owner in the consumer group (added while a static member was away); rejoining the group so that they are assigned");
            self.unowned.clear();
            return self
                .source
                .rejoin(&self.config.source.topics)
                .map_err(PipelineError::kafka("rejoining the consumer group"));
        }
        self.unowned = unowned;
        Ok(())
    }

    /// Commits the open epoch if it has work, then drops the tasks of `revoked` and gives up
    /// their partitions.
    fn revoke(&mut self, revoked: &[TaskId]) -> Result<(), PipelineError> {
        if self.has_work()? {
            self.checkpoint()?;
        }
        // Committed before the partitions go: no later transaction may carry them.
        self.coordinator.settle()?;
        self.tasks.retain(|t| !revoked.contains(t.id()));
        self.lanes.retain(|t, _| !revoked.contains(t));
        self.coordinator.forget(revoked);
        self.reindex();
        self.source.unassign(revoked).map_err(PipelineError::kafka("giving up revoked source partitions"))?;
        self.metrics.assigned(self.tasks.len());
        tracing::info!(partitions = ?revoked.iter().map(ToString::to_string).collect::<Vec<_>>(), kept = self.tasks.len(), "partitions revoked by the consumer group; their open epoch committed");
        Ok(())
    }

    /// Recovers the tasks of `assigned`, creates them, and starts reading their partitions.
    fn assign(&mut self, assigned: Vec<TaskId>) -> Result<(), PipelineError> {
        // Recovery reads the state the committing epoch is applied to.
        self.coordinator.settle()?;
        // A static member that comes back within `session.timeout.ms` gets its old assignment
        // without a rebalance (KIP-345), also when the pipeline's `source.topics` changed
        // meanwhile (or another pipeline used the group id): only a new join reassigns.
        let foreign: Vec<String> = assigned
            .iter()
            .filter(|t| !self.config.source.topics.contains(&t.topic))
            .map(ToString::to_string)
            .collect();
        if !foreign.is_empty() {
            tracing::warn!(partitions = ?foreign, "the consumer group assigned partitions of topics this pipeline does not read (an assignment kept from before source.topics changed); rejoining the group so that it assigns anew");
            // The assignment is taken (paused: nothing is read) so that librdkafka's rebalance
            // completes and the unsubscribe revokes it and leaves the group.
            self.source.hold(&assigned).map_err(PipelineError::kafka("acknowledging an assignment"))?;
            return self
                .source
                .rejoin(&self.config.source.topics)
                .map_err(PipelineError::kafka("rejoining the consumer group"));
        }
        let assigned: Vec<TaskId> =
            assigned.into_iter().filter(|t| self.index_of(&t.topic, t.partition).is_none()).collect();
        if assigned.is_empty() {
            self.source
                .assign_more(&BTreeMap::new())
                .map_err(PipelineError::kafka("acknowledging an empty assignment"))?;
            self.metrics.assigned(self.tasks.len());
            return Ok(());
        }
        let config = self.config;
        // Partitions added to a source topic while running need changelog partitions.
        let all = self.source_tasks()?;
        let known = all.iter().chain(assigned.iter());
        self.preflight.ensure_changelog(config, &self.changelog, &known.cloned().collect::<Vec<_>>())?;
        let from_savepoint = self.savepoint().is_some();
        let recover = RecoverOptions {
            timeout: config.checkpoint.timeout,
            check_group: self.coordinator.offsets_are_evidence(),
            // A savepoint's positions replace the group's offsets, and its state the local one.
            ignore_group_offsets: self.options.ignore_group_offsets || from_savepoint,
            start_from_group: config.source.start == StartPosition::Group,
            lost: match (from_savepoint, self.options.reseed_changelog) {
                (true, _) => LostChangelog::Discard,
                (false, true) => LostChangelog::Reseed,
                (false, false) => LostChangelog::Refuse,
            },
        };
        let adoptable = self.tasks.is_empty() && (!self.lineage_from_group || recover.ignore_group_offsets);
        self.metrics.restoring(assigned.len());
        let Recovered { mut committed, next, group, reseed, changelog_topic_id } = recovery::recover_tasks(
            &self.db,
            &self.source,
            &self.reader,
            &assigned,
            &self.owner,
            &mut self.lineage,
            adoptable,
            &recover,
        )?;
        self.coordinator.raise_floor(next);
        if self.tasks.is_empty() {
            self.coordinator.renumber()?;
        }
        // Whether the pipeline ever committed a checkpoint, on any instance: a partition without
        // an offset then was added since, and starts at its earliest offset.
        let pipeline_group = self.source.group_offsets(&all, config.checkpoint.timeout).map_err(
            PipelineError::kafka(format!("fetching consumer group {}'s committed offsets", self.source.group_id())),
        )?;
        let first_start =
            committed.offsets.is_empty() && recovery::group_lineage(&pipeline_group, &config.name).is_none();
        self.coordinator.resolve_departed(
            &self.source,
            &pipeline_group,
            &config.name,
            &config.sink.transactional_id_prefix,
        )?;

        let mut seeds = BTreeMap::new();
        for task in &reseed {
            seeds.insert(task.clone(), restore::reseed_writes(&self.db, task)?);
        }
        if !reseed.is_empty() {
            self.reseeding = Some(changelog_topic_id);
        }
        if let Some(savepoint) = self.savepoint() {
            if !self.tasks.is_empty() || all.iter().any(|t| !assigned.contains(t)) {
                return Err(PipelineError::Refused(format!(
                    "--from-savepoint loads the savepoint into every partition of the pipeline at once, but this process was given {} of the {} partitions; start the pipeline from the savepoint with one instance, then add the others",
                    assigned.len(),
                    all.len()
                )));
            }
            let operators: Vec<&str> = self.chain.iter().map(|(_, transform)| transform.name.as_str()).collect();
            let restorable = savepoint::Restorable {
                tasks: &all,
                operators: &operators,
                allow_non_restored_state: self.options.allow_non_restored_state,
            };
            seeds = savepoint::load(&self.db, savepoint, &restorable)?;
            self.lineage.lineage = savepoint.manifest.id.clone();
            let restored = self.db.committed()?;
            committed.offsets = restored.offsets;
            committed.snapshots = restored.snapshots;
            self.coordinator.raise_floor(self.db.epoch_floor()?.next());
            self.loading_savepoint = true;
            self.coordinator.renumber()?;
            tracing::info!(savepoint = %savepoint.manifest.id, of = %savepoint.manifest.pipeline, checkpoint = %savepoint::checkpoint(savepoint), tasks = savepoint.tasks.len(), "starting from a savepoint; the first checkpoint writes it to the changelog and the group");
        }
        let positions = recovery::start_positions(
            config,
            &self.source,
            &assigned,
            &committed,
            &self.topic_ids,
            &group,
            first_start,
        )?;
        for id in &assigned {
            let snapshot = |operator: &str| committed.snapshots.get(&(operator.to_owned(), id.clone())).cloned();
            let mut task = Task::new(
                id.clone(),
                self.chain,
                &self.outputs,
                &self.limits,
                self.db.clone(),
                snapshot,
                positions.get(id).copied(),
                config.source.watermark.as_ref(),
                &self.metrics,
            )?;
            if let Some(writes) = seeds.remove(id) {
                task.seed_changelog(writes);
            }
            // The least busy worker takes the task for as long as it is assigned.
            let lane = (0..self.workers.len()).min_by_key(|lane| self.lanes.values().filter(|l| *l == lane).count());
            self.lanes.insert(id.clone(), lane.unwrap_or(0));
            self.tasks.push(task);
        }
        if !self.loading_savepoint {
            // A reseeded task's position is written with its state, as on a first start.
            let kept = |t: &TaskId| assigned.contains(t) && !reseed.contains(t);
            self.coordinator.record(committed.offsets.iter().filter(|(t, _)| kept(t)).map(|(t, o)| (t.clone(), *o)));
        }
        self.reindex();
        self.source.assign_more(&positions).map_err(PipelineError::kafka("assigning the source partitions"))?;
        tracing::info!(partitions = ?assigned.iter().map(ToString::to_string).collect::<Vec<_>>(), tasks = self.tasks.len(), checkpoint = %committed.id, "partitions assigned by the consumer group; their state is restored");
        self.metrics.restored(committed.id);
        self.metrics.assigned(self.tasks.len());
        // Commit at once positions that are new or moved, and offsets the group lost (deleted,
        // expired): they are the next recovery's evidence.
        let moved = assigned.iter().any(|t| positions.get(t) != self.coordinator.recorded().get(t));
        let lost = recover.check_group && assigned.iter().any(|t| !group.contains_key(t));
        if moved || lost || self.loading_savepoint || self.reseeding.is_some() {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// The savepoint to load, unless the pipeline already started from it.
    pub(super) fn savepoint(&self) -> Option<&'a Savepoint> {
        self.options.from_savepoint.as_ref().filter(|s| {
            let applied = s.manifest.id == self.lineage.lineage;
            if applied && !self.loading_savepoint {
                tracing::info!(savepoint = %s.manifest.id, "the pipeline started from this savepoint before; --from-savepoint is ignored");
            }
            !applied
        })
    }

    /// Every partition of the source topics, from the cluster's metadata.
    pub(super) fn source_tasks(&self) -> Result<Vec<TaskId>, PipelineError> {
        let counts = self
            .source
            .partition_counts(&self.config.source.topics, self.config.checkpoint.timeout)
            .map_err(PipelineError::kafka("reading the source topics' metadata"))?;
        Ok(counts
            .into_iter()
            .flat_map(|(topic, n)| (0..n).map(move |partition| TaskId::new(topic.clone(), partition)))
            .collect())
    }

    /// Rebuilds the index of tasks by partition and the list of their overlays.
    pub(super) fn reindex(&mut self) {
        self.task_index.clear();
        for (index, task) in self.tasks.iter().enumerate() {
            self.task_index.entry(task.id().topic.clone()).or_default().insert(task.id().partition, index);
        }
        self.overlays = self.tasks.iter().map(|t| t.overlays().clone()).collect();
    }
}
