//! The parts of a client request body the router reads (docs/rules/router.md §2.1, §5): `model`, and the
//! session-key inputs — `prompt_cache_key`, `previous_response_id`, the first two chat
//! `messages`, the Responses `instructions` and first `input` item. One pass over the body
//! checks that it is JSON and keeps only those parts; the rest (a long conversation, tool
//! output) is skipped, not built into a `serde_json::Value` (parsing a 200 KB body whole costs
//! about a millisecond). Tolerant: a field of an unexpected type reads as absent, as
//! `Value::get` would. Also the list of session headers the router reads (and forwards).
//! Must not: keep or log the body.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Chat messages that go into the fingerprint (`core::affinity`'s `FINGERPRINT_MESSAGES`).
const HEAD_MESSAGES: usize = 2;

/// What the router reads of a request body.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RequestHead {
    /// `model`, as given (a non-string is kept and refused by the caller).
    #[serde(default)]
    pub model: Option<Value>,
    #[serde(default)]
    prompt_cache_key: Option<Value>,
    #[serde(default)]
    pub previous_response_id: Option<Value>,
    #[serde(default)]
    instructions: Option<Value>,
    /// The first [`HEAD_MESSAGES`] messages, when `messages` is an array.
    #[serde(default, deserialize_with = "first_items")]
    messages: Option<Vec<Value>>,
    /// A string `input` as is; an array `input` as its first item only.
    #[serde(default, deserialize_with = "input_head")]
    input: Option<Value>,
}

impl RequestHead {
    /// Reads `body`; `Err` when it is not one JSON object (the 400 "not valid JSON").
    pub fn parse(body: &[u8]) -> serde_json::Result<Self> {
        // A derived struct would also read a JSON array (fields by position).
        if body.trim_ascii_start().first() != Some(&b'{') {
            return Err(de::Error::custom("the body is not a JSON object"));
        }
        serde_json::from_slice(body)
    }

    /// `model` when it is a string.
    pub fn model(&self) -> Option<&str> {
        self.model.as_ref().and_then(Value::as_str)
    }

    /// `previous_response_id` when it is a string.
    pub fn previous_response_id(&self) -> Option<&str> {
        self.previous_response_id.as_ref().and_then(Value::as_str)
    }

    /// The session-key inputs as a JSON object shaped like the body (`messages` cut to its
    /// first two, `input` to its first item), for `core::affinity::session_key`, which reads
    /// the same keys of the whole body to the same result.
    pub fn key_body(self) -> Value {
        let mut m = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.to_string(), v);
            }
        };
        put("prompt_cache_key", self.prompt_cache_key);
        put("instructions", self.instructions);
        put("messages", self.messages.map(Value::Array));
        put("input", self.input);
        Value::Object(m)
    }
}

/// `messages`: its first [`HEAD_MESSAGES`] items when it is an array, else `None`.
fn first_items<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Value>>, D::Error> {
    d.deserialize_any(Head {
        keep: HEAD_MESSAGES,
        whole_string: false,
    })
    .map(|v| match v {
        Some(Value::Array(items)) => Some(items),
        _ => None,
    })
}

/// `input`: a string as is, an array as an array of its first item, else `None`.
fn input_head<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    d.deserialize_any(Head {
        keep: 1,
        whole_string: true,
    })
}

/// Reads any JSON value, keeping an array's first `keep` items (as `Value::Array`) and, when
/// `whole_string`, a string; everything else is skipped and reads as `None`.
struct Head {
    keep: usize,
    whole_string: bool,
}

impl<'de> Visitor<'de> for Head {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(self.keep);
        while items.len() < self.keep {
            match seq.next_element::<Value>()? {
                Some(v) => items.push(v),
                None => return Ok(Some(Value::Array(items))),
            }
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Some(Value::Array(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.whole_string.then(|| Value::String(v.to_string())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(self.whole_string.then_some(Value::String(v)))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Session headers, first present wins (docs/rules/router.md §2.1; docs/router.md "Session key").
/// `session-id` is `session_id` as Codex CLI 0.171 spells it (next to it: the same id);
/// `thread-id`, Codex's per-thread id, comes last, after the older `conversation_id`, so a client
/// sending several keeps the id it sent first in this order.
pub(crate) const SESSION_HEADERS: [&str; 7] = [
    "x-session-id",
    "session_id",
    "session-id",
    "x-dsh-router-session",
    "x-claude-code-session-id",
    "conversation_id",
    "thread-id",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::affinity::{KeyInput, session_key};
    use crate::core::router::Api;
    use serde_json::json;

    fn key_of_whole(body: &Value, api: Api) -> Option<u64> {
        let input = KeyInput {
            header: None,
            body,
            api,
            previous_response: None,
        };
        session_key(&input).map(|k| k.hash)
    }

    fn key_of_head(body: &Value, api: Api) -> Option<u64> {
        let head = RequestHead::parse(body.to_string().as_bytes()).expect("parses");
        key_of_whole(&head.key_body(), api)
    }

    #[test]
    fn the_head_gives_the_same_session_key_as_the_whole_body() {
        let long: Vec<Value> = (0..50)
            .map(|i| json!({"role": "user", "content": format!("turn {i}")}))
            .collect();
        let mut messages = vec![
            json!({"role": "system", "content": "You are terse."}),
            json!({"role": "user", "content": [{"type": "text", "text": "Say hello."}]}),
        ];
        messages.extend(long);
        let bodies = [
            (
                json!({"model": "gpt-5", "messages": messages}),
                Api::ChatCompletions,
            ),
            (
                json!({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}),
                Api::ChatCompletions,
            ),
            (
                json!({"model": "gpt-5", "prompt_cache_key": "conv-7", "messages": []}),
                Api::ChatCompletions,
            ),
            (
                json!({"model": "gpt-5", "instructions": "Be brief.", "input": "Hello"}),
                Api::Responses,
            ),
            (
                json!({"model": "gpt-5", "input": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}),
                Api::Responses,
            ),
            (
                json!({"model": "gpt-5", "input": ["first", "second"]}),
                Api::Responses,
            ),
            (
                json!({"model": "gpt-5", "messages": "not an array", "input": 7}),
                Api::ChatCompletions,
            ),
            (
                json!({"model": "gpt-5", "messages": {"role": "user"}}),
                Api::ChatCompletions,
            ),
        ];
        for (body, api) in &bodies {
            assert_eq!(key_of_head(body, *api), key_of_whole(body, *api), "{body}");
        }
        assert!(key_of_head(&bodies[0].0, Api::ChatCompletions).is_some());
    }

    #[test]
    fn later_messages_do_not_change_the_key_but_the_first_two_do() {
        let a = json!({"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "x"}]});
        let b = json!({"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "y"}]});
        let c = json!({"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "v"}]});
        let k = |v: &Value| key_of_head(v, Api::ChatCompletions);
        assert_eq!(k(&a), k(&b));
        assert_ne!(k(&a), k(&c));
    }

    #[test]
    fn model_and_previous_response_are_read_only_as_strings() {
        let head =
            RequestHead::parse(br#"{"model":"gpt-5","previous_response_id":"resp_1"}"#).unwrap();
        assert_eq!(head.model(), Some("gpt-5"));
        assert_eq!(head.previous_response_id(), Some("resp_1"));
        let head = RequestHead::parse(br#"{"model":5,"previous_response_id":null}"#).unwrap();
        assert_eq!(head.model(), None);
        assert_eq!(head.previous_response_id(), None);
    }

    #[test]
    fn a_body_that_is_not_one_json_object_is_refused() {
        for bad in [
            &b"not json"[..],
            b"{\"model\":\"m\"",
            b"[1,2]",
            b"\"s\"",
            b"{\"model\":\"m\"} trailing",
        ] {
            assert!(
                RequestHead::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
