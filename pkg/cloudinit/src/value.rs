//! A generic, order-preserving YAML value, so that unknown keys can be reported by name and every field
//! error can name its path.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::{Error, Result};

/// One YAML node as cloud-init (PyYAML, YAML 1.1) would see it.
#[derive(Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    Seq(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

impl Value {
    /// A short type name for error messages (never the value: it may be secret).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Str(_) => "a string",
            Value::Bytes(_) => "binary data",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }

    /// The key as text (YAML keys may be scalars of any type).
    pub(crate) fn key_text(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Null => "null".into(),
            other => format!("<{}>", other.kind()),
        }
    }

    pub(crate) fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

// Never print values: bootstrap data is secret.
impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Value({})", self.kind())
    }
}

/// One node before its tag is looked at.
struct Untagged(Value);

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        // `!!binary` scalars arrive as their base64 text (see `ignore_binary_tag_for_string`) and are
        // decoded here, so binary that is not UTF-8 (gzip) survives, as with PyYAML.
        let serde_saphyr::Tagged(Untagged(value), tag) = serde_saphyr::Tagged::<Untagged>::deserialize(d)?;
        match (tag, value) {
            (Some(t), Value::Str(s)) if t.ends_with("binary") => {
                let compact: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
                base64::Engine::decode(&base64::engine::general_purpose::STANDARD, compact)
                    .map(Value::Bytes)
                    .map_err(|_| serde::de::Error::custom("invalid base64 in !!binary scalar"))
            }
            (_, value) => Ok(value),
        }
    }
}

impl<'de> Deserialize<'de> for Untagged {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Vis;
        impl<'de> Visitor<'de> for Vis {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_bool<E>(self, v: bool) -> std::result::Result<Value, E> {
                Ok(Value::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Value, E> {
                Ok(Value::Int(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<Value, E> {
                Ok(Value::Int(v.into()))
            }
            fn visit_i128<E>(self, v: i128) -> std::result::Result<Value, E> {
                Ok(Value::Int(v))
            }
            fn visit_u128<E: serde::de::Error>(self, v: u128) -> std::result::Result<Value, E> {
                i128::try_from(v)
                    .map(Value::Int)
                    .map_err(|_| E::custom("integer out of range"))
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Value, E> {
                Ok(Value::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Value, E> {
                Ok(Value::Str(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> std::result::Result<Value, E> {
                Ok(Value::Str(v))
            }
            fn visit_bytes<E>(self, v: &[u8]) -> std::result::Result<Value, E> {
                Ok(Value::Bytes(v.to_vec()))
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> std::result::Result<Value, E> {
                Ok(Value::Bytes(v))
            }
            fn visit_none<E>(self) -> std::result::Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_unit<E>(self) -> std::result::Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> std::result::Result<Value, D2::Error> {
                Value::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> std::result::Result<Value, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element()? {
                    v.push(x);
                }
                Ok(Value::Seq(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> std::result::Result<Value, A::Error> {
                let mut v = Vec::new();
                while let Some(entry) = a.next_entry()? {
                    v.push(entry);
                }
                Ok(Value::Map(v))
            }
        }
        d.deserialize_any(Vis).map(Untagged)
    }
}

/// Parse YAML text into a [`Value`] with PyYAML-compatible scalar rules (YAML 1.1 `0644` octal, `yes`/`no`).
pub(crate) fn parse_yaml(text: &str) -> Result<Value> {
    let options = serde_saphyr::options! {
        legacy_octal_numbers: true,
        with_snippet: false,
        ignore_binary_tag_for_string: true,
    };
    serde_saphyr::from_str_with_options::<Value>(text, options).map_err(|e| Error::ParseYaml {
        message: e.to_string(),
    })
}

/// A mapping being read field by field; remembers which keys were consumed so leftovers can be rejected.
pub(crate) struct Fields<'a> {
    path: String,
    entries: &'a [(Value, Value)],
    used: Vec<bool>,
}

impl<'a> Fields<'a> {
    /// Read `value` at `path` as a mapping.
    pub(crate) fn new(path: impl Into<String>, value: &'a Value) -> Result<Self> {
        let path = path.into();
        match value {
            Value::Map(entries) => Ok(Self {
                used: vec![false; entries.len()],
                path,
                entries,
            }),
            other => Err(Error::invalid(
                path,
                format!("expected a mapping, found {}", other.kind()),
            )),
        }
    }

    /// Path of a field of this mapping.
    pub(crate) fn path_of(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    /// The value under `key`, if present (a `null` value counts as absent).
    pub(crate) fn get(&mut self, key: &str) -> Option<&'a Value> {
        let mut found = None;
        for (i, (k, v)) in self.entries.iter().enumerate() {
            if matches!(k, Value::Str(s) if s == key) {
                self.used[i] = true;
                found = Some(v);
            }
        }
        found.filter(|v| !v.is_null())
    }

    /// An optional string field.
    pub(crate) fn str(&mut self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => scalar_string(&self.path_of(key), v).map(Some),
        }
    }

    /// A required string field.
    pub(crate) fn required_str(&mut self, key: &str) -> Result<String> {
        self.str(key)?
            .ok_or_else(|| Error::invalid(self.path_of(key), "is required"))
    }

    /// An optional boolean field (YAML 1.1 spellings, and the strings cloud-init accepts).
    pub(crate) fn bool(&mut self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => as_bool(&self.path_of(key), v).map(Some),
        }
    }

    /// Fail when a key was not consumed, naming it.
    pub(crate) fn deny_unknown(&self) -> Result<()> {
        for ((k, _), used) in self.entries.iter().zip(&self.used) {
            if !used {
                return Err(Error::invalid(
                    format!("{}.{}", self.path, k.key_text()),
                    "unknown field (not supported by this provider)",
                ));
            }
        }
        Ok(())
    }
}

/// A scalar as text: strings as-is, numbers and booleans as YAML would print them.
pub(crate) fn scalar_string(path: &str, v: &Value) -> Result<String> {
    match v {
        Value::Str(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        Value::Float(f) => Ok(f.to_string()),
        Value::Bool(b) => Ok(if *b { "True" } else { "False" }.to_owned()),
        Value::Bytes(b) => String::from_utf8(b.clone())
            .map_err(|_| Error::invalid(path, "expected text, found non-UTF-8 binary data")),
        other => Err(Error::invalid(
            path,
            format!("expected a string, found {}", other.kind()),
        )),
    }
}

/// A boolean; accepts YAML booleans and the strings `true`/`false`/`yes`/`no`/`on`/`off`/`1`/`0`.
pub(crate) fn as_bool(path: &str, v: &Value) -> Result<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Int(0) => Ok(false),
        Value::Int(1) => Ok(true),
        Value::Str(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Ok(true),
            "false" | "no" | "off" | "0" => Ok(false),
            _ => Err(Error::invalid(path, "expected a boolean")),
        },
        other => Err(Error::invalid(
            path,
            format!("expected a boolean, found {}", other.kind()),
        )),
    }
}

/// A list of strings; a single string is accepted as a one-item list when `split_commas` is false, or
/// split on commas when it is true (cloud-init's `groups: a, b`).
pub(crate) fn string_list(path: &str, v: &Value, split_commas: bool) -> Result<Vec<String>> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Seq(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| scalar_string(&format!("{path}[{i}]"), item))
            .collect(),
        Value::Str(s) if split_commas => Ok(s
            .split(',')
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect()),
        Value::Str(s) => Ok(vec![s.clone()]),
        other => Err(Error::invalid(
            path,
            format!("expected a list of strings, found {}", other.kind()),
        )),
    }
}
