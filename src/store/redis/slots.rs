//! Redis Cluster slots: which slot a key hashes to, which master serves each slot, and
//! `CLUSTER SLOTS` replies read as ranges.

use std::sync::Arc;

use redis::Value;

use super::node::Node;

/// Slots in a Redis Cluster.
const SLOTS: u16 = 16384;

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the part between the first
/// `{` and the next `}`, when not empty), else of the whole key, modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .map(|close| &rest[..close])
        })
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tag) % SLOTS
}

/// Which master serves each slot.
#[derive(Default)]
pub(super) struct SlotMap {
    /// `(first, last, master)`, sorted by `first`, not overlapping.
    pub(super) ranges: Vec<(u16, u16, Arc<Node>)>,
}

impl SlotMap {
    /// The master serving `slot`, if any.
    pub(super) fn owner(&self, slot: u16) -> Option<&Arc<Node>> {
        let after = self.ranges.partition_point(|r| r.0 <= slot);
        let (_, last, node) = self.ranges.get(after.checked_sub(1)?)?;
        (slot <= *last).then_some(node)
    }

    /// Every master serving at least one slot, once each.
    pub(super) fn masters(&self) -> Vec<Arc<Node>> {
        let mut out: Vec<Arc<Node>> = Vec::new();
        for (_, _, node) in &self.ranges {
            if !out.iter().any(|n| Arc::ptr_eq(n, node)) {
                out.push(node.clone());
            }
        }
        out
    }
}

/// `CLUSTER SLOTS` as `(first, last, "host:port" of the master)`; an empty host is
/// `asked_host`, ranges whose master's address is unknown (`?`) are left out.
///
/// # Errors
/// A reply of another shape.
pub(super) fn parse_slots(
    reply: &Value,
    asked_host: &str,
) -> Result<Vec<(u16, u16, String)>, String> {
    let bad = || format!("unexpected CLUSTER SLOTS reply: {reply:?}");
    let Value::Array(entries) = reply else {
        return Err(bad());
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return Err(bad());
        };
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return Err(bad());
        };
        let (Ok(first), Ok(last)) = (u16::try_from(*first), u16::try_from(*last)) else {
            return Err(bad());
        };
        let host = match master.first() {
            Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
            Some(Value::SimpleString(host)) => host.clone(),
            _ => return Err(bad()),
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return Err(bad());
        };
        if host == "?" || first > last || last >= SLOTS {
            continue;
        }
        let host = if host.is_empty() { asked_host } else { &host };
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        out.push((first, last, format!("{host}:{port}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag() {
        // Values from the Redis Cluster specification's CRC16 test vector and
        // `CLUSTER KEYSLOT`.
        assert_eq!(
            crc16::State::<crc16::XMODEM>::calculate(b"123456789"),
            0x31C3
        );
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(
            slot(b"foo{}{bar}"),
            slot(b"bar"),
            "an empty tag hashes the key"
        );
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn slot_replies_parse_or_say_why() {
        let int = Value::Int;
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![
            Value::Array(vec![
                int(0),
                int(5460),
                Value::Array(vec![bulk("127.0.0.1"), int(7000), bulk("id")]),
                Value::Array(vec![bulk("127.0.0.1"), int(7003), bulk("id")]),
            ]),
            Value::Array(vec![
                int(5461),
                int(10922),
                Value::Array(vec![bulk(""), int(7001)]),
            ]),
            Value::Array(vec![
                int(10923),
                int(16383),
                Value::Array(vec![bulk("?"), int(7002)]),
            ]),
        ]);
        assert_eq!(
            parse_slots(&reply, "10.0.0.9").expect("valid"),
            [
                (0, 5460, "127.0.0.1:7000".to_string()),
                (5461, 10922, "10.0.0.9:7001".to_string())
            ]
        );
        for bad in [
            Value::Nil,
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Array(vec![int(-1), int(3), Value::Nil])]),
        ] {
            assert!(parse_slots(&bad, "h").is_err(), "{bad:?}");
        }
    }
}
