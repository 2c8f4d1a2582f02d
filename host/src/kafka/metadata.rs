//! The offset metadata Weir commits with each checkpoint's source offsets: recovery's evidence of
//! which checkpoint a consumer group offset belongs to (DESIGN.md, "Exactly-once protocol").
//!
//! Format: `weir:ckpt=<N>;pipeline=<name>;lineage=<hex>;txn=<transactional.id>;wm=<ms>` (`wm`:
//! the partition's event-time watermark, for `weir status`; only with `[source.watermark]`, after
//! the partition's first record). Pipeline names, transactional id prefixes and lineages contain
//! neither `;` nor `=` (config validation), so the fields split unambiguously. The whole string
//! stays far below the broker's `offset.metadata.max.bytes` (4096 by default).
//!
//! # Compatibility: Weir 0.1's form
//! Pre-release Weir 0.1 wrote `weir:ckpt=<N>` alone: it had no lineage yet. A consumer group it
//! committed keeps that offset until a later version's first checkpoint commits over it, so
//! recovery must still read it: it parses with neither pipeline nor lineage
//! ([`CheckpointMetadata::lineage`] is `None`), and, naming no lineage, may belong to any
//! ([`CheckpointMetadata::is_of`]). These two branches, marked "Weir 0.1's form" below, are all
//! of it.

use crate::types::CheckpointId;

/// Prefix of every offset metadata Weir writes.
const PREFIX: &str = "weir:";

/// Which life of which pipeline wrote a checkpoint: the pipeline name and the state directory's
/// lineage ([`crate::state::StateDb::lineage`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lineage {
    /// The pipeline's `name`.
    pub pipeline: String,
    /// The state directory's lineage id.
    pub lineage: String,
}

/// What the metadata of one committed group offset says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointMetadata {
    /// The checkpoint whose transaction committed this offset.
    pub checkpoint: CheckpointId,
    /// Pipeline and lineage; `None` in Weir 0.1's form.
    pub lineage: Option<Lineage>,
    /// The `transactional.id` that carried the checkpoint; `None` in Weir 0.1's form and under
    /// at-least-once and none.
    pub transactional_id: Option<String>,
    /// The partition's event-time watermark when the checkpoint sealed it, in milliseconds since
    /// the Unix epoch; `None` without event time or before the partition's first record.
    pub watermark: Option<i64>,
}

impl CheckpointMetadata {
    /// The metadata string, e.g. `weir:ckpt=7;pipeline=orders;lineage=9f…;txn=orders-1`.
    pub fn encode(&self) -> String {
        let mut text = format!("{PREFIX}ckpt={}", self.checkpoint);
        if let Some(lineage) = &self.lineage {
            text.push_str(&format!(";pipeline={};lineage={}", lineage.pipeline, lineage.lineage));
        }
        if let Some(id) = &self.transactional_id {
            text.push_str(&format!(";txn={id}"));
        }
        if let Some(watermark) = self.watermark {
            text.push_str(&format!(";wm={watermark}"));
        }
        text
    }

    /// Parses a group offset's metadata; `None` when Weir did not write it (empty, or set by
    /// another tool).
    pub fn parse(text: &str) -> Option<Self> {
        let mut fields = text.strip_prefix(PREFIX)?.split(';');
        let checkpoint = CheckpointId(fields.next()?.strip_prefix("ckpt=")?.parse().ok()?);
        let (mut pipeline, mut lineage, mut transactional_id, mut watermark) = (None, None, None, None);
        for field in fields {
            match field.split_once('=')? {
                ("pipeline", value) => pipeline = Some(value.to_owned()),
                ("lineage", value) => lineage = Some(value.to_owned()),
                ("txn", value) => transactional_id = Some(value.to_owned()),
                ("wm", value) => watermark = Some(value.parse().ok()?),
                _ => return None,
            }
        }
        let lineage = match (pipeline, lineage) {
            (Some(pipeline), Some(lineage)) => Some(Lineage { pipeline, lineage }),
            // Weir 0.1's form (see the module's documentation).
            (None, None) => None,
            _ => return None,
        };
        Some(Self { checkpoint, lineage, transactional_id, watermark })
    }

    /// Whether this metadata may belong to `ours`: it names the same pipeline and lineage, or it
    /// is Weir 0.1's form, which named neither.
    pub fn is_of(&self, ours: &Lineage) -> bool {
        // `None`: Weir 0.1's form (see the module's documentation).
        self.lineage.as_ref().is_none_or(|lineage| lineage == ours)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours() -> Lineage {
        Lineage { pipeline: "orders".into(), lineage: "abc".into() }
    }

    #[test]
    fn round_trips_and_names_the_pipeline_lineage_and_transactional_id() {
        let metadata = CheckpointMetadata {
            checkpoint: CheckpointId(42),
            lineage: Some(ours()),
            transactional_id: Some("orders-1".into()),
            watermark: None,
        };
        let text = metadata.encode();
        assert_eq!(text, "weir:ckpt=42;pipeline=orders;lineage=abc;txn=orders-1");
        assert_eq!(CheckpointMetadata::parse(&text), Some(metadata.clone()));
        let timed = CheckpointMetadata { watermark: Some(1_356_998_399_999), ..metadata.clone() };
        assert_eq!(timed.encode(), "weir:ckpt=42;pipeline=orders;lineage=abc;txn=orders-1;wm=1356998399999");
        assert_eq!(CheckpointMetadata::parse(&timed.encode()), Some(timed));
        assert!(metadata.is_of(&ours()));
        assert!(!metadata.is_of(&Lineage { pipeline: "orders".into(), lineage: "older-life".into() }));
        assert!(!metadata.is_of(&Lineage { pipeline: "payments".into(), lineage: "abc".into() }));
    }

    #[test]
    fn weir_0_1_metadata_parses_without_a_lineage() {
        let legacy = CheckpointMetadata::parse("weir:ckpt=7").unwrap();
        assert_eq!(legacy.checkpoint, CheckpointId(7));
        assert_eq!(legacy.lineage, None);
        assert!(legacy.is_of(&ours()));
    }

    #[test]
    fn foreign_metadata_is_not_weirs() {
        for text in ["", "reset by hand", "weir:ckpt=x", "weir:ckpt=1;pipeline=a", "weir:ckpt=1;owner=me", "ckpt=1"] {
            assert_eq!(CheckpointMetadata::parse(text), None, "{text}");
        }
    }
}
