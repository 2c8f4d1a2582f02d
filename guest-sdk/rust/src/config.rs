use std::fmt::Display;
use std::str::FromStr;

/// The operator's configuration: `(key, value)` string pairs in the order the pipeline file
/// lists them.
///
/// Lookups return the last value given for a key. Errors are `String`s that name the key (and
/// the bad value), ready to return from [`Transform::init`](crate::Transform::init).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    entries: Vec<(String, String)>,
}

impl Config {
    /// Builds a configuration from `(key, value)` pairs.
    pub fn new(entries: Vec<(String, String)>) -> Self {
        Config { entries }
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The value of `key`, or an error naming the missing key.
    pub fn require(&self, key: &str) -> Result<&str, String> {
        self.get(key).ok_or_else(|| format!("missing required config key `{key}`"))
    }

    /// Parses the value of `key`, or returns `default` when the key is absent.
    ///
    /// The error names the key and the value that did not parse, e.g.
    /// ``config key `threshold_minutes`: invalid value "ten": invalid digit found in string``.
    pub fn parse<T>(&self, key: &str, default: T) -> Result<T, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        Ok(self.parse_opt(key)?.unwrap_or(default))
    }

    /// Parses the value of `key` if present; `Ok(None)` when it is absent.
    pub fn parse_opt<T>(&self, key: &str) -> Result<Option<T>, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        self.get(key)
            .map(|v| v.parse().map_err(|e| format!("config key `{key}`: invalid value {v:?}: {e}")))
            .transpose()
    }

    /// Fails with an error naming the first key that is not in `allowed` (and listing the
    /// allowed keys), so typos in a pipeline file do not go unnoticed.
    pub fn allow_only(&self, allowed: &[&str]) -> Result<(), String> {
        match self.entries.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some((k, _)) if allowed.is_empty() => {
                Err(format!("unknown config key `{k}` (this transform takes no configuration)"))
            }
            Some((k, _)) => Err(format!("unknown config key `{k}` (allowed: {})", allowed.join(", "))),
        }
    }

    /// All `(key, value)` pairs, in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Config {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Config::new(iter.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_and_errors() {
        let c: Config = [("n", "1"), ("bad", "x"), ("n", "2")].into_iter().collect();
        assert_eq!(c.get("n"), Some("2"));
        assert_eq!(c.parse("n", 0u32), Ok(2));
        assert_eq!(c.parse("missing", 7u32), Ok(7));
        let err = c.parse("bad", 0u32).unwrap_err();
        assert!(err.contains("`bad`") && err.contains("\"x\""), "{err}");
        assert!(c.require("missing").unwrap_err().contains("`missing`"));
        let err = c.allow_only(&["n"]).unwrap_err();
        assert!(err.contains("`bad`") && err.contains("allowed: n"), "{err}");
        assert!(c.allow_only(&["n", "bad"]).is_ok());
    }
}
