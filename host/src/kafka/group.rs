//! The consumer group as the coordinator describes it: which partitions its members own.
//!
//! A static member (KIP-345) that comes back within `session.timeout.ms` gets its old
//! assignment without a rebalance, even when partitions were added to the source topics
//! meanwhile; nobody then owns them. [`Source::owners`](super::Source::owners) reads who owns
//! each partition from the members' assignments, decoded here, so that such partitions are
//! found.

use std::collections::BTreeSet;

use crate::types::TaskId;

/// The partitions of a member's assignment: the `ConsumerProtocolAssignment` bytes the group
/// leader wrote (Kafka protocol, versions 0–3 share the layout: `int16` version, then an
/// `int32`-counted array of topics, each an `int16`-length name and an `int32`-counted array of
/// `int32` partitions, then user data, ignored).
///
/// # Errors
/// A description of what is malformed, when `bytes` is truncated.
pub fn decode_assignment(bytes: &[u8]) -> Result<BTreeSet<TaskId>, String> {
    let mut reader = Reader { bytes };
    let mut tasks = BTreeSet::new();
    if reader.bytes.is_empty() {
        return Ok(tasks);
    }
    reader.take(2, "version")?;
    for _ in 0..reader.count("topic count")? {
        let length = i16::from_be_bytes(reader.array("topic name length")?);
        let name = reader.take(usize::try_from(length).unwrap_or(0), "topic name")?;
        let topic = String::from_utf8_lossy(name).into_owned();
        for _ in 0..reader.count("partition count")? {
            let partition = i32::from_be_bytes(reader.array("partition")?);
            tasks.insert(TaskId::new(topic.clone(), partition));
        }
    }
    Ok(tasks)
}

/// The `group.instance.id` of a static member from its member id, `<group.instance.id>-<uuid>`
/// (Kafka's group coordinator names static members so); another member id whole.
pub fn instance_of(member_id: &str) -> String {
    let at = member_id.len().saturating_sub(37);
    match (member_id.get(..at), member_id.get(at..)) {
        (Some(instance), Some(rest)) if !instance.is_empty() && rest.strip_prefix('-').is_some_and(is_uuid) => {
            instance.to_owned()
        }
        _ => member_id.to_owned(),
    }
}

/// Whether `text` is a UUID in its 8-4-4-4-12 hexadecimal form.
fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(i, c)| if [8, 13, 18, 23].contains(&i) { c == '-' } else { c.is_ascii_hexdigit() })
}

/// A cursor over big-endian protocol bytes.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(format!("member assignment truncated at its {what}"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        Ok(self.take(N, what)?.try_into().expect("take returned N bytes"))
    }

    /// An array's element count (`-1`, a null array, is none).
    fn count(&mut self, what: &str) -> Result<usize, String> {
        Ok(usize::try_from(i32::from_be_bytes(self.array(what)?)).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(topics: &[(&str, &[i32])]) -> Vec<u8> {
        let mut bytes = 1i16.to_be_bytes().to_vec();
        bytes.extend((topics.len() as i32).to_be_bytes());
        for (topic, partitions) in topics {
            bytes.extend((topic.len() as i16).to_be_bytes());
            bytes.extend(topic.as_bytes());
            bytes.extend((partitions.len() as i32).to_be_bytes());
            for partition in *partitions {
                bytes.extend(partition.to_be_bytes());
            }
        }
        bytes.extend((-1i32).to_be_bytes()); // null user data
        bytes
    }

    fn task(topic: &str, partition: i32) -> TaskId {
        TaskId::new(topic, partition)
    }

    #[test]
    fn decodes_every_topic_and_partition() {
        let bytes = encode(&[("flights", &[0, 3, 5]), ("weather", &[1])]);
        let tasks = decode_assignment(&bytes).unwrap();
        assert_eq!(
            tasks,
            BTreeSet::from([task("flights", 0), task("flights", 3), task("flights", 5), task("weather", 1)])
        );
    }

    #[test]
    fn a_static_member_id_names_its_instance() {
        assert_eq!(instance_of("host-a-6f1d0c1e-5b7a-4c1e-9f3a-0123456789ab"), "host-a");
        assert_eq!(instance_of("rdkafka-client-6f1d0c1e"), "rdkafka-client-6f1d0c1e");
        assert_eq!(instance_of("-6f1d0c1e-5b7a-4c1e-9f3a-0123456789ab"), "-6f1d0c1e-5b7a-4c1e-9f3a-0123456789ab");
    }

    #[test]
    fn an_empty_assignment_owns_nothing() {
        assert!(decode_assignment(&[]).unwrap().is_empty());
        assert!(decode_assignment(&encode(&[])).unwrap().is_empty());
    }

    #[test]
    fn truncated_bytes_are_an_error_naming_the_field() {
        let bytes = encode(&[("flights", &[0, 1])]);
        let error = decode_assignment(&bytes[..bytes.len() - 6]).unwrap_err();
        assert!(error.contains("partition"), "{error}");
    }
}
