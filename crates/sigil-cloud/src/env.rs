//! Where cloud clients read their settings and credentials: environment
//! variables by their usual names (VAULT_ADDR, AWS_REGION, …), from the
//! process or from entries the embedding program adds, and files those
//! variables point to (token files of workload identities).

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read as _;

/// The largest credentials or token file read.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Settings by environment-variable name. Its `Debug` shows names only:
/// values are credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Env {
    vars: BTreeMap<String, String>,
}

impl fmt::Debug for Env {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

impl Env {
    /// The process environment (only variables whose value is UTF-8).
    pub fn from_process() -> Self {
        Self {
            vars: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
        }
    }

    /// Settings from the given pairs only.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// Sets `name`, replacing a value from the process.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.vars.insert(name.into(), value.into());
    }

    /// The value of `name`, trimmed; `None` when unset or blank.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// The first of `names` that is set.
    pub fn first(&self, names: &[&str]) -> Option<&str> {
        names.iter().find_map(|n| self.get(n))
    }

    /// The names that are set, for messages.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.vars.keys().map(String::as_str)
    }

    /// Reads the file `variable` points to (at most [`MAX_FILE_BYTES`]),
    /// trimmed. The error says `variable=path: what failed`, for the
    /// caller's own error type.
    pub fn read_file(&self, variable: &str, path: &str) -> Result<String, String> {
        let fail = |reason: String| format!("{variable}={path}: {reason}");
        let file = std::fs::File::open(path).map_err(|e| fail(format!("cannot open: {e}")))?;
        let mut text = String::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| fail(format!("cannot read as UTF-8 text: {e}")))?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(fail(format!("larger than {MAX_FILE_BYTES} bytes")));
        }
        Ok(text.trim().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_names_variables_but_never_shows_their_values() {
        let env = Env::from_pairs([("VAULT_TOKEN", "s.secret-token")]);
        let shown = format!("{env:?}");
        assert!(shown.contains("VAULT_TOKEN"), "{shown}");
        assert!(!shown.contains("secret-token"), "{shown}");
    }

    #[test]
    fn blank_values_count_as_unset_and_the_first_set_name_wins() {
        let env = Env::from_pairs([("A", "  "), ("B", " b "), ("C", "c")]);
        assert_eq!(env.get("A"), None);
        assert_eq!(env.first(&["A", "B", "C"]), Some("b"));
    }

    #[test]
    fn an_oversized_token_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("sigil-cloud-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big");
        std::fs::write(&path, vec![b'a'; MAX_FILE_BYTES as usize + 1]).unwrap();
        let env = Env::default();
        let err = env
            .read_file("AWS_WEB_IDENTITY_TOKEN_FILE", path.to_str().unwrap())
            .unwrap_err();
        assert!(err.contains("larger than 65536 bytes"), "{err}");
        assert!(err.starts_with("AWS_WEB_IDENTITY_TOKEN_FILE="), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
