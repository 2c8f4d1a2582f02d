//! Savepoints: a portable copy of a pipeline's committed state, taken from its changelog, from
//! which a pipeline (the same one, or a new one, on this cluster or another) can start.
//!
//! # Format (`weir-savepoint/1`)
//! A directory with `manifest.json` and one data file per task:
//!
//! - `manifest.json`: `format`, `id` (a random id; a pipeline started from the savepoint takes it
//!   as its lineage), `pipeline`, `changelog_topic`, `source_topics`, `created_unix_ms`,
//!   `components` (operator name → SHA-256 of the component it ran, when the state directory was
//!   at hand), and `tasks`: for each, `topic`, `partition`, `checkpoint` (the checkpoint its state
//!   is as of), `offset` (next source offset), `file`, `entries`, `bytes`.
//! - `tasks/<topic>.<partition>.bin`: the task's changelog, reduced to the last record of each
//!   key without tombstones, as a sequence of `key length (u32 BE) | key | value length (u32 BE)
//!   | value`, keys and values as in the changelog topic ([`ChangelogEntry`]).
//!
//! A task's state and position come from the same checkpoint (each changelog partition holds
//! whole checkpoints up to its last stable offset), so every task restarts consistently; tasks
//! are independent, so they need not be at the same checkpoint.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::is_topic_name;
use crate::error::PipelineError;
use crate::kafka::{ChangelogReader, ReadBatch};
use crate::state::{ChangelogEntry, Entries, StateDb, Writes};
use crate::types::{CheckpointId, TaskId};

/// The format this version writes and reads.
pub const FORMAT: &str = "weir-savepoint/1";
const MANIFEST: &str = "manifest.json";

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: String,
    /// A random id, the lineage of a pipeline started from the savepoint.
    pub id: String,
    /// The pipeline it was taken from.
    pub pipeline: String,
    /// That pipeline's changelog topic.
    pub changelog_topic: String,
    /// That pipeline's source topics, in its file's order.
    pub source_topics: Vec<String>,
    /// When it was taken, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// Operator name → SHA-256 (hex) of the component it last ran.
    pub components: BTreeMap<String, String>,
    /// One entry per task that ever committed a checkpoint.
    pub tasks: Vec<TaskManifest>,
}

/// One task of a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskManifest {
    /// Source topic.
    pub topic: String,
    /// Source partition.
    pub partition: i32,
    /// The checkpoint the task's state is as of.
    pub checkpoint: u64,
    /// Next source offset to read.
    pub offset: i64,
    /// The data file, relative to the savepoint directory.
    pub file: String,
    /// Records in the data file.
    pub entries: u64,
    /// Bytes of keys and values in the data file.
    pub bytes: u64,
}

/// A savepoint in memory: its manifest and each task's changelog records.
#[derive(Debug, Clone)]
pub struct Savepoint {
    /// The manifest.
    pub manifest: Manifest,
    /// Per task, its records (key, value), in key order.
    pub tasks: BTreeMap<TaskId, Entries>,
}

fn refused(what: String) -> PipelineError {
    PipelineError::Refused(what)
}

fn unusable(what: String) -> PipelineError {
    PipelineError::Savepoint(what)
}

/// Reads each task's changelog partition up to its last stable offset, reduced to the last
/// record per key; tasks that never committed a checkpoint are left out.
///
/// # Errors
/// [`PipelineError::Kafka`] when the changelog cannot be read; [`PipelineError::Savepoint`] for
/// a record Weir did not write.
pub fn take(
    reader: &ChangelogReader,
    tasks: &[TaskId],
    pipeline: &str,
    components: BTreeMap<String, String>,
    timeout: Duration,
) -> Result<Savepoint, PipelineError> {
    let changelog = reader.changelog();
    let topic = &changelog.topic;
    let (mut from, mut until, mut task_of) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    for task in tasks {
        let partition = changelog.partition(task);
        let (low, high) = reader
            .range(partition, timeout)
            .map_err(PipelineError::kafka(format!("reading the offsets of changelog topic {topic}[{partition}]")))?;
        if low < high {
            from.insert(partition, low);
            until.insert(partition, high);
            task_of.insert(partition, task.clone());
        }
    }
    let mut latest: BTreeMap<i32, BTreeMap<Vec<u8>, Option<Vec<u8>>>> = BTreeMap::new();
    let kafka = |error| PipelineError::kafka(format!("reading changelog topic {topic}"))(error);
    reader.read(&from, &until, 4096, timeout, kafka, |partition, batch: ReadBatch, _| {
        latest.entry(partition).or_default().extend(batch.into_iter().map(|(key, value, _)| (key, value)));
        Ok(())
    })?;
    let mut savepoint = Savepoint {
        manifest: Manifest {
            format: FORMAT.into(),
            id: uuid::Uuid::new_v4().simple().to_string(),
            pipeline: pipeline.into(),
            changelog_topic: topic.clone(),
            source_topics: changelog.source_topics().to_vec(),
            created_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            components,
            tasks: Vec::new(),
        },
        tasks: BTreeMap::new(),
    };
    for (partition, records) in latest {
        let task = &task_of[&partition];
        let records: Entries = records.into_iter().filter_map(|(key, value)| value.map(|value| (key, value))).collect();
        let mut position = None;
        for (key, value) in &records {
            match ChangelogEntry::decode(key, Some(value)) {
                Some(ChangelogEntry::Position(p)) if p.task == *task => position = Some(p),
                Some(_) => {}
                None => {
                    return Err(unusable(format!(
                        "cannot take a savepoint: changelog topic {topic}[{partition}] holds a record Weir did not \
                         write (is state.changelog_topic another application's topic?)"
                    )));
                }
            }
        }
        let Some(position) = position else { continue };
        savepoint.manifest.tasks.push(TaskManifest {
            topic: task.topic.clone(),
            partition: task.partition,
            checkpoint: position.checkpoint.0,
            offset: position.offset,
            file: task_file(task),
            entries: records.len() as u64,
            bytes: records.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum(),
        });
        savepoint.tasks.insert(task.clone(), records);
    }
    Ok(savepoint)
}

/// Writes `savepoint` into `dir`, which must not exist or be empty.
///
/// # Errors
/// [`PipelineError::Savepoint`] when `dir` is not empty or cannot be written.
pub fn write(savepoint: &Savepoint, dir: &Path) -> Result<(), PipelineError> {
    let io = |what: &str| {
        let what = format!("{what} in {}", dir.display());
        move |e: std::io::Error| unusable(format!("cannot write the savepoint: {what}: {e}"))
    };
    if dir.read_dir().is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(unusable(format!("savepoint directory {} is not empty; name a new directory", dir.display())));
    }
    std::fs::create_dir_all(dir.join("tasks")).map_err(io("creating tasks/"))?;
    for task in &savepoint.manifest.tasks {
        let records = &savepoint.tasks[&TaskId::new(task.topic.clone(), task.partition)];
        let mut data = Vec::with_capacity(task.bytes as usize + 8 * records.len());
        for (key, value) in records {
            data.extend_from_slice(&(key.len() as u32).to_be_bytes());
            data.extend_from_slice(key);
            data.extend_from_slice(&(value.len() as u32).to_be_bytes());
            data.extend_from_slice(value);
        }
        std::fs::write(dir.join(&task.file), data).map_err(io(&task.file))?;
    }
    let manifest = serde_json::to_vec_pretty(&savepoint.manifest).expect("a manifest serialises");
    std::fs::write(dir.join(MANIFEST), manifest).map_err(io(MANIFEST))
}

/// Reads the savepoint in `dir`.
///
/// # Errors
/// [`PipelineError::Savepoint`] naming the file when it is missing, of another format, or damaged.
pub fn read(dir: &Path) -> Result<Savepoint, PipelineError> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read(&path)
        .map_err(|e| unusable(format!("cannot read savepoint manifest {}: {e}", path.display())))?;
    let manifest: Manifest = serde_json::from_slice(&text)
        .map_err(|e| unusable(format!("savepoint manifest {} is not valid: {e}", path.display())))?;
    if manifest.format != FORMAT {
        return Err(unusable(format!(
            "savepoint {} has format {:?}; this Weir reads {FORMAT:?}",
            dir.display(),
            manifest.format
        )));
    }
    // The id becomes the pipeline's lineage, which checkpoint metadata carries between `;`s.
    let id_ok = (1..=64).contains(&manifest.id.len()) && manifest.id.bytes().all(|b| b.is_ascii_alphanumeric());
    if !id_ok {
        return Err(unusable(format!(
            "savepoint manifest {} is damaged: id {:?} is not 1 to 64 letters and digits",
            path.display(),
            manifest.id
        )));
    }
    let mut tasks = BTreeMap::new();
    for task in &manifest.tasks {
        let id = TaskId::new(task.topic.clone(), task.partition);
        // Only the file `write` names: an edited manifest must not send the read elsewhere.
        if !is_topic_name(&task.topic) || task.file != task_file(&id) {
            return Err(unusable(format!(
                "savepoint manifest {} is damaged: task {id} names file {:?}, not {:?}",
                path.display(),
                task.file,
                task_file(&id)
            )));
        }
        let path = dir.join(&task.file);
        let data = std::fs::read(&path)
            .map_err(|e| unusable(format!("cannot read savepoint file {}: {e}", path.display())))?;
        let records = decode_records(&data)
            .filter(|records| records.len() as u64 == task.entries)
            .ok_or_else(|| unusable(format!("savepoint file {} is damaged (truncated or edited)", path.display())))?;
        tasks.insert(TaskId::new(task.topic.clone(), task.partition), records);
    }
    Ok(Savepoint { manifest, tasks })
}

/// The file of `task`'s records, relative to the savepoint's directory.
fn task_file(task: &TaskId) -> String {
    format!("tasks/{}.{}.bin", task.topic, task.partition)
}

fn decode_records(mut data: &[u8]) -> Option<Entries> {
    let take = |data: &mut &[u8]| -> Option<Vec<u8>> {
        let len = u32::from_be_bytes(data.get(..4)?.try_into().ok()?) as usize;
        let bytes = data.get(4..4 + len)?.to_vec();
        *data = &data[4 + len..];
        Some(bytes)
    };
    let mut records = Vec::new();
    while !data.is_empty() {
        let key = take(&mut data)?;
        let value = take(&mut data)?;
        records.push((key, value));
    }
    Some(records)
}

/// What of a savepoint the pipeline it is loaded into would restore: its tasks (source
/// partitions) and the operators its state is kept under (a transform's name; its timers are
/// `<name>:timers`, and Weir's own scopes, such as event time's, are always restored).
#[derive(Debug, Clone, Copy)]
pub struct Restorable<'a> {
    /// Every task of the pipeline: each partition of its source topics.
    pub tasks: &'a [TaskId],
    /// The names of its transforms.
    pub operators: &'a [&'a str],
    /// Whether state it would not restore may be dropped (`weir run --allow-non-restored-state`,
    /// Flink's flag); without it, a savepoint holding such state is refused.
    pub allow_non_restored_state: bool,
}

impl Restorable<'_> {
    /// Whether state kept under `scope` (an operator name, `<name>:timers`, or Weir's own) is
    /// restored.
    fn restores(&self, scope: &str) -> bool {
        scope.starts_with("weir:")
            || self.operators.iter().any(|name| scope == *name || scope.strip_prefix(name) == Some(":timers"))
    }
}

/// The scope (operator) a savepoint entry's state is kept under; `None` for a position.
fn scope_of(entry: &ChangelogEntry) -> Option<String> {
    match entry {
        ChangelogEntry::State { key, .. } => {
            let end = key.iter().position(|&b| b == 0).unwrap_or(key.len());
            Some(String::from_utf8_lossy(&key[..end]).into_owned())
        }
        ChangelogEntry::Snapshot { operator, .. } => Some(operator.clone()),
        ChangelogEntry::Position(_) => None,
    }
}

/// Loads `savepoint` into `db` for the pipeline `restorable` describes: each task's state
/// becomes the savepoint's (its other keys deleted), with its snapshots and position, and `db`
/// is released from its owner under lineage `savepoint.manifest.id` until the first checkpoint
/// writes it all to the changelog. Returns, per task, the writes that checkpoint must carry
/// (deletes of the keys the savepoint lacks, then every state entry of the savepoint).
///
/// State the pipeline would not restore — tasks of partitions or topics it does not read, state
/// of operators it does not have (a transform renamed or removed) — is refused, naming each,
/// unless `restorable.allow_non_restored_state`: then it is left out and logged.
///
/// # Errors
/// [`PipelineError::Refused`] for state the pipeline would not restore, or a damaged savepoint;
/// [`PipelineError::State`] when RocksDB fails.
pub fn load(
    db: &StateDb,
    savepoint: &Savepoint,
    restorable: &Restorable<'_>,
) -> Result<BTreeMap<TaskId, Writes>, PipelineError> {
    let mut decoded = BTreeMap::new();
    let mut dropped = std::collections::BTreeSet::new();
    for (task, records) in &savepoint.tasks {
        let mut entries = Vec::with_capacity(records.len());
        for (key, value) in records {
            let entry = ChangelogEntry::decode(key, Some(value))
                .ok_or_else(|| refused(format!("the savepoint's records of {task} are damaged")))?;
            entries.push(entry);
        }
        if !restorable.tasks.contains(task) {
            dropped.insert(format!(
                "task {task} (the pipeline reads no such partition: source.topics, or the topic's partitions)"
            ));
            continue;
        }
        for scope in entries.iter().filter_map(scope_of).filter(|scope| !restorable.restores(scope)) {
            dropped.insert(format!("the state of operator `{scope}` (the pipeline has no transform of that name)"));
        }
        entries.retain(|entry| scope_of(entry).is_none_or(|scope| restorable.restores(&scope)));
        decoded.insert(task.clone(), entries);
    }
    if !dropped.is_empty() {
        let dropped: Vec<String> = dropped.into_iter().collect();
        if !restorable.allow_non_restored_state {
            return Err(refused(format!(
                "the savepoint holds state this pipeline would not restore: {}. Starting would drop it; name the \
                 transforms and source topics as the savepoint's pipeline did, or pass --allow-non-restored-state to \
                 start without that state",
                dropped.join("; ")
            )));
        }
        tracing::warn!(dropped = %dropped.join("; "), "--allow-non-restored-state: starting without the savepoint's state the pipeline does not use");
    }
    let mut seeds = BTreeMap::new();
    db.set_owner(None, &savepoint.manifest.id)?;
    let committed = db.committed()?;
    for (task, entries) in decoded {
        let kept: std::collections::BTreeSet<&Vec<u8>> = entries
            .iter()
            .filter_map(|e| match e {
                ChangelogEntry::State { key, .. } => Some(key),
                _ => None,
            })
            .collect();
        let mut writes: Writes =
            db.task_keys(&task)?.into_iter().filter(|key| !kept.contains(key)).map(|key| (key, None)).collect();
        let mut restored: Vec<ChangelogEntry> =
            writes.iter().map(|(key, _)| ChangelogEntry::State { key: key.clone(), value: None }).collect();
        for entry in entries {
            if let ChangelogEntry::State { key, value } = &entry {
                writes.push((key.clone(), value.clone()));
            }
            restored.push(entry);
        }
        let reflected = committed.changelog_offsets.get(&task).copied().unwrap_or(0);
        db.restore(&task, &restored, reflected)?;
        seeds.insert(task, writes);
    }
    Ok(seeds)
}

/// The checkpoint a loaded savepoint's tasks are as of, the highest of them.
pub fn checkpoint(savepoint: &Savepoint) -> CheckpointId {
    CheckpointId(savepoint.manifest.tasks.iter().map(|t| t.checkpoint).max().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn savepoint_of(topic: &str) -> Savepoint {
        let task = TaskManifest {
            topic: topic.into(),
            partition: 0,
            checkpoint: 3,
            offset: 10,
            file: task_file(&TaskId::new(topic, 0)),
            entries: 1,
            bytes: 2,
        };
        let manifest = Manifest {
            format: FORMAT.into(),
            id: "lineage".into(),
            pipeline: "p".into(),
            changelog_topic: "p-changelog".into(),
            source_topics: vec![topic.into()],
            created_unix_ms: 0,
            components: BTreeMap::new(),
            tasks: vec![task],
        };
        let tasks = BTreeMap::from([(TaskId::new(topic, 0), vec![(b"k".to_vec(), b"v".to_vec())])]);
        Savepoint { manifest, tasks }
    }

    #[test]
    fn a_savepoint_reads_back_and_an_edited_manifest_cannot_point_outside_it() {
        let dir = tempfile::tempdir().unwrap();
        let written = savepoint_of("flights");
        write(&written, dir.path()).unwrap();
        let read_back = read(dir.path()).unwrap();
        assert_eq!((read_back.manifest, read_back.tasks), (written.manifest.clone(), written.tasks));

        // A file outside `tasks/`, or a topic that is no Kafka name (which would make one).
        let outside = std::fs::canonicalize(dir.path().join("tasks/flights.0.bin")).unwrap();
        for (topic, file) in [
            ("flights", "../flights.0.bin".to_owned()),
            ("flights", outside.display().to_string()),
            ("../../x", "tasks/../../x.0.bin".to_owned()),
        ] {
            let mut manifest = written.manifest.clone();
            manifest.tasks[0].topic = topic.into();
            manifest.tasks[0].file = file.clone();
            std::fs::write(dir.path().join(MANIFEST), serde_json::to_vec(&manifest).unwrap()).unwrap();
            let error = read(dir.path()).unwrap_err().to_string();
            assert!(error.contains("is damaged") && error.contains(&format!("{file:?}")), "{file}: {error}");
        }
        // An id that would not fit checkpoint metadata.
        let mut manifest = written.manifest.clone();
        manifest.id = "x;txn=y".into();
        std::fs::write(dir.path().join(MANIFEST), serde_json::to_vec(&manifest).unwrap()).unwrap();
        let error = read(dir.path()).unwrap_err().to_string();
        assert!(error.contains("is damaged: id \"x;txn=y\""), "{error}");
    }

    /// A savepoint of operator `dedup` (state and snapshot) on `flights` partitions 0 and 1.
    fn savepoint_of_dedup() -> Savepoint {
        let mut savepoint = savepoint_of("flights");
        savepoint.tasks.clear();
        for partition in 0..2 {
            let task = TaskId::new("flights", partition);
            let mut key = crate::state::state_prefix("dedup", &task);
            key.extend_from_slice(b"seen");
            let entries = [
                ChangelogEntry::State { key, value: Some(b"1".to_vec()) },
                ChangelogEntry::Snapshot { operator: "dedup".into(), task: task.clone(), bytes: b"s".to_vec() },
            ];
            let records = entries.iter().map(|e| e.encode()).map(|(k, v)| (k, v.unwrap())).collect();
            savepoint.tasks.insert(task, records);
        }
        savepoint
    }

    #[test]
    fn state_the_pipeline_would_not_restore_is_refused_naming_it_unless_allowed() {
        let savepoint = savepoint_of_dedup();
        let (one, two) = (TaskId::new("flights", 0), TaskId::new("flights", 1));
        let cases: [(&[TaskId], &[&str], &str); 3] = [
            (&[one.clone(), two.clone()], &["dedup-v2"], "operator `dedup`"),
            (std::slice::from_ref(&one), &["dedup"], "task flights[1]"),
            (&[TaskId::new("other", 0)], &["dedup"], "task flights[0]"),
        ];
        for (tasks, operators, named) in cases {
            let dir = tempfile::tempdir().unwrap();
            let db = StateDb::open(dir.path()).unwrap();
            let refused = Restorable { tasks, operators, allow_non_restored_state: false };
            let error = load(&db, &savepoint, &refused).unwrap_err().to_string();
            assert!(error.contains(named) && error.contains("--allow-non-restored-state"), "{named}: {error}");
            let allowed = Restorable { allow_non_restored_state: true, ..refused };
            let seeds = load(&db, &savepoint, &allowed).unwrap();
            assert!(seeds.keys().all(|task| tasks.contains(task)), "{named}: only the pipeline's tasks are loaded");
            let kept = db.committed().unwrap();
            assert!(kept.snapshots.keys().all(|(operator, _)| operators.contains(&operator.as_str())), "{named}");
        }
        // Everything restored: loads as before.
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path()).unwrap();
        let all = Restorable { tasks: &[one, two], operators: &["dedup"], allow_non_restored_state: false };
        assert_eq!(load(&db, &savepoint, &all).unwrap().len(), 2);
    }
}
