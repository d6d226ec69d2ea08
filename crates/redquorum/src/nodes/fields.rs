//! Reading the replies that are lists of named fields (`SENTINEL REPLICAS`, `SENTINEL DEBUG`,
//! `CONFIG GET`) in either protocol: a flat list of names and values (RESP2) or a map (RESP3).
//! Its own module so that the node kinds that read them (`sentinels`, `endpoint`) share one
//! reader without importing each other.

use redis::Value;

/// The field names and values of a reply that is a flat list of them (RESP2) or a map (RESP3);
/// empty for anything else (an error reply, a refusal).
pub(crate) fn fields(reply: &Value) -> Vec<(String, String)> {
    match reply {
        Value::Array(flat) => flat
            .chunks(2)
            .filter_map(|pair| match pair {
                [k, v] => Some((text(k), text(v))),
                _ => None,
            })
            .collect(),
        Value::Map(map) => map.iter().map(|(k, v)| (text(k), text(v))).collect(),
        _ => Vec::new(),
    }
}

/// A reply's text (a bulk or simple string, or a number); empty for anything else.
pub(crate) fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        _ => String::new(),
    }
}

/// `pairs` as a RESP2 reply of named fields (for tests of the readers).
#[cfg(test)]
pub(crate) fn flat(pairs: &[(&str, &str)]) -> Value {
    Value::Array(
        pairs
            .iter()
            .flat_map(|(k, v)| {
                [
                    Value::BulkString(k.as_bytes().to_vec()),
                    Value::BulkString(v.as_bytes().to_vec()),
                ]
            })
            .collect(),
    )
}
