//! What the sink's topics refuse of a record besides its size ([`super::RecordLimit`]): a
//! timestamp outside the topic's bounds, and a record without a key in a compacted topic. The
//! broker refuses such a record when the transaction carrying it is already open, and would refuse
//! it again on every replay; checked when the operator returns it, it fails that call instead, so
//! it is dead-lettered (`on_error = "dead-letter"`) or stops the pipeline naming its source
//! position (`"fail"`).

use std::collections::BTreeMap;

/// How long after the check a record may reach the broker, in milliseconds: the producer sends it
/// as soon as the call returns, and librdkafka's retries end with `delivery.timeout.ms` well
/// before. A timestamp within this margin of `message.timestamp.before.max.ms` counts as too old.
pub const BROKER_CLOCK_MARGIN_MS: i64 = 60_000;

/// What one topic's broker refuses of a record, from the topic's configs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicRules {
    /// The topic.
    pub topic: String,
    /// How far a timestamp may lie behind the broker's clock, in milliseconds:
    /// `message.timestamp.before.max.ms` (KIP-937) of a `CreateTime` topic. `None`: no bound
    /// (Kafka's default, `Long.MAX_VALUE`), or a `LogAppendTime` topic, whose broker replaces
    /// the timestamp.
    pub before_max_ms: Option<i64>,
    /// How far a timestamp may lie ahead of the broker's clock, in milliseconds:
    /// `message.timestamp.after.max.ms` (KIP-937; one hour by default since Kafka 4.0).
    pub after_max_ms: Option<i64>,
    /// Whether `cleanup.policy` includes `compact`: the broker refuses a record without a key
    /// (`INVALID_RECORD`).
    pub requires_key: bool,
}

impl TopicRules {
    /// The rules of `topic` from its configs (names and values as `DescribeConfigs` reports
    /// them); a missing or unreadable entry sets no rule.
    pub fn from_configs(topic: &str, configs: &BTreeMap<String, String>) -> Self {
        let create_time = configs.get("message.timestamp.type").is_none_or(|t| t == "CreateTime");
        // Long.MAX_VALUE, Kafka's "no bound", and anything near it bound nothing.
        let bound = |key: &str| {
            configs.get(key).and_then(|v| v.parse::<i64>().ok()).filter(|ms| create_time && *ms < i64::MAX / 4)
        };
        Self {
            topic: topic.to_owned(),
            before_max_ms: bound("message.timestamp.before.max.ms"),
            after_max_ms: bound("message.timestamp.after.max.ms"),
            requires_key: configs.get("cleanup.policy").is_some_and(|p| p.split(',').any(|p| p.trim() == "compact")),
        }
    }

    /// Whether the topic refuses some records for their key or timestamp.
    pub fn is_unbounded(&self) -> bool {
        self.before_max_ms.is_none() && self.after_max_ms.is_none() && !self.requires_key
    }

    /// Why the topic's broker would refuse a record with a key (or none) and `timestamp`
    /// (milliseconds since the Unix epoch; `None`: the producer stamps its clock), checked at
    /// `now_ms`; `None` when it would take it.
    pub fn refusal(&self, has_key: bool, timestamp: Option<i64>, now_ms: i64) -> Option<String> {
        let topic = &self.topic;
        if self.requires_key && !has_key {
            return Some(format!(
                "it has no key, and topic `{topic}` is compacted (cleanup.policy includes compact): the broker \
                 refuses a record without a key (INVALID_RECORD)"
            ));
        }
        let timestamp = timestamp?;
        if let Some(after) = self.after_max_ms
            && timestamp > now_ms.saturating_add(after)
        {
            return Some(format!(
                "its timestamp {timestamp} is {} ms ahead of the clock, more than topic `{topic}`'s \
                 message.timestamp.after.max.ms = {after}: the broker refuses it (INVALID_TIMESTAMP)",
                timestamp - now_ms
            ));
        }
        if let Some(before) = self.before_max_ms
            && timestamp < now_ms.saturating_sub(before).saturating_add(BROKER_CLOCK_MARGIN_MS)
        {
            return Some(format!(
                "its timestamp {timestamp} is {} ms behind the clock, more than (or within {BROKER_CLOCK_MARGIN_MS} ms \
                 of) topic `{topic}`'s message.timestamp.before.max.ms = {before}: the broker refuses it \
                 (INVALID_TIMESTAMP)",
                now_ms.saturating_sub(timestamp)
            ));
        }
        None
    }
}

/// The rules of a pipeline's sink topics: `sink.topic`'s, and each named output's
/// (`sink.outputs`, by output name). The default is no rule at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkRules {
    /// `sink.topic`'s rules.
    pub topic: TopicRules,
    /// Each named output's topic's rules, by output name.
    pub outputs: BTreeMap<String, TopicRules>,
}

impl SinkRules {
    /// The rules of the topic an output record goes to: its named output's, else `sink.topic`'s.
    pub fn of(&self, output: Option<&str>) -> &TopicRules {
        output.and_then(|name| self.outputs.get(name)).unwrap_or(&self.topic)
    }

    /// Whether no topic refuses any record for its key or timestamp.
    pub fn is_unbounded(&self) -> bool {
        self.topic.is_unbounded() && self.outputs.values().all(TopicRules::is_unbounded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn timestamps_outside_the_bounds_and_keyless_records_of_compacted_topics_are_refused() {
        let rules = TopicRules::from_configs(
            "out",
            &configs(&[
                ("message.timestamp.type", "CreateTime"),
                ("message.timestamp.after.max.ms", "3600000"),
                ("message.timestamp.before.max.ms", "86400000"),
                ("cleanup.policy", "compact,delete"),
            ]),
        );
        let now = 1_800_000_000_000;
        assert_eq!(rules.refusal(true, Some(now), now), None);
        assert_eq!(rules.refusal(true, None, now), None);
        assert_eq!(rules.refusal(true, Some(now + 3_600_000), now), None);
        let ahead = rules.refusal(true, Some(now + 2 * 86_400_000), now).expect("too far ahead");
        assert!(ahead.contains("message.timestamp.after.max.ms = 3600000") && ahead.contains("`out`"), "{ahead}");
        let behind = rules.refusal(true, Some(now - 86_400_000), now).expect("too far behind");
        assert!(behind.contains("message.timestamp.before.max.ms"), "{behind}");
        assert!(rules.refusal(true, Some(now - 86_400_000 + 2 * BROKER_CLOCK_MARGIN_MS), now).is_none());
        let keyless = rules.refusal(false, Some(now), now).expect("no key");
        assert!(keyless.contains("compacted"), "{keyless}");
    }

    #[test]
    fn log_append_time_and_unbounded_defaults_refuse_nothing() {
        let log_append = TopicRules::from_configs(
            "out",
            &configs(&[("message.timestamp.type", "LogAppendTime"), ("message.timestamp.after.max.ms", "1000")]),
        );
        assert!(log_append.is_unbounded());
        let defaults = TopicRules::from_configs(
            "out",
            &configs(&[("message.timestamp.before.max.ms", &i64::MAX.to_string()), ("cleanup.policy", "delete")]),
        );
        assert!(defaults.is_unbounded());
        assert_eq!(defaults.refusal(false, Some(0), 1_800_000_000_000), None);
    }

    #[test]
    fn a_named_output_has_its_topics_rules() {
        let compacted = TopicRules { topic: "keyed".into(), requires_key: true, ..TopicRules::default() };
        let rules = SinkRules { topic: TopicRules::default(), outputs: [("keyed".to_owned(), compacted)].into() };
        assert!(rules.of(Some("keyed")).requires_key);
        assert!(!rules.of(None).requires_key);
        assert!(!rules.is_unbounded());
    }
}
