//! The invariant every pipeline that copies its input must keep, checked on what a reader saw:
//! every input record came out exactly once (no loss, no duplicate), and the records of one key
//! came out in the order they went in.

use std::collections::BTreeMap;

use crate::Consumed;

/// How many of the missing and duplicated records a failure lists.
const SHOWN: usize = 20;

/// Asserts that `output` holds every `(key, value)` of `input` exactly once, and, per key, in
/// input order. Records without a key carry no order: a producer spreads them over partitions.
/// `context` (e.g. `"; log:\n…"` with the pipeline's log, or empty) ends each failure message.
///
/// # Panics
/// When a record is missing or came out twice, or a key's records came out of order, naming
/// the counts, the records concerned and the key.
pub fn assert_exactly_once_in_key_order(output: &[Consumed], input: &[(Option<String>, String)], context: &str) {
    let got: Vec<(Option<String>, String)> =
        output.iter().map(|r| (r.key.clone(), r.value.clone().unwrap_or_default())).collect();
    let mut balance: BTreeMap<&(Option<String>, String), i64> = BTreeMap::new();
    for record in input {
        *balance.entry(record).or_default() += 1;
    }
    for record in &got {
        *balance.entry(record).or_default() -= 1;
    }
    let missing: Vec<_> = balance.iter().filter(|(_, n)| **n > 0).map(|(r, _)| *r).collect();
    let extra: Vec<_> = balance.iter().filter(|(_, n)| **n < 0).map(|(r, _)| *r).collect();
    assert!(
        missing.is_empty() && extra.is_empty() && got.len() == input.len(),
        "every input exactly once: {} outputs of {} inputs; {} missing (first {SHOWN}: {:?}); {} duplicated or \
         unexpected (first {SHOWN}: {:?}){context}",
        got.len(),
        input.len(),
        missing.len(),
        &missing[..missing.len().min(SHOWN)],
        extra.len(),
        &extra[..extra.len().min(SHOWN)],
    );
    let per_key = |records: &[(Option<String>, String)]| {
        let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (key, value) in records {
            if let Some(key) = key {
                values.entry(key.clone()).or_default().push(value.clone());
            }
        }
        values
    };
    // The multisets are equal, so both maps have the same keys, in the same (sorted) order.
    for ((key, got), want) in per_key(&got).iter().zip(per_key(input).values()) {
        assert!(got == want, "order of {key}: came out as {got:?}, went in as {want:?}{context}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(records: &[(Option<&str>, &str)]) -> Vec<Consumed> {
        let consumed = |(offset, (key, value)): (usize, &(Option<&str>, &str))| Consumed {
            partition: 0,
            offset: offset as i64,
            key: key.map(str::to_owned),
            value: Some((*value).to_owned()),
        };
        records.iter().enumerate().map(consumed).collect()
    }

    fn input() -> Vec<(Option<String>, String)> {
        [(Some("a"), "1"), (Some("b"), "2"), (Some("a"), "3"), (None, "4"), (None, "5")]
            .iter()
            .map(|(k, v)| (k.map(str::to_owned), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn keys_interleaved_and_keyless_records_in_any_order_pass() {
        let output = out(&[(Some("b"), "2"), (None, "5"), (Some("a"), "1"), (None, "4"), (Some("a"), "3")]);
        assert_exactly_once_in_key_order(&output, &input(), "");
    }

    #[test]
    #[should_panic(expected = "1 missing")]
    fn a_lost_record_fails() {
        let output = out(&[(Some("a"), "1"), (Some("b"), "2"), (Some("a"), "3"), (None, "4")]);
        assert_exactly_once_in_key_order(&output, &input(), "");
    }

    #[test]
    #[should_panic(expected = "1 duplicated or unexpected")]
    fn a_duplicate_fails() {
        let output =
            out(&[(Some("a"), "1"), (Some("b"), "2"), (Some("a"), "3"), (None, "4"), (None, "5"), (None, "5")]);
        assert_exactly_once_in_key_order(&output, &input(), "");
    }

    #[test]
    #[should_panic(expected = "order of a")]
    fn a_key_out_of_order_fails() {
        let output = out(&[(Some("a"), "3"), (Some("b"), "2"), (Some("a"), "1"), (None, "4"), (None, "5")]);
        assert_exactly_once_in_key_order(&output, &input(), "");
    }
}
