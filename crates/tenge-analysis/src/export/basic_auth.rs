//! Who may scrape `/metrics`: users and bcrypt hashes of their passwords, as
//! the `basic_auth_users` of a Prometheus exporter-toolkit web config (the
//! file node_exporter's `--web.config.file` reads) has them.

use base64::Engine;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, PoisonError};

pub struct Users {
    hashes: BTreeMap<String, String>,
    /// `Authorization` values already verified: bcrypt is slow on purpose,
    /// and a scraper sends the same one every time.
    verified: Mutex<HashSet<String>>,
}

impl Users {
    /// Users by name with their bcrypt hashes; refused if a hash is not one.
    pub fn new(hashes: BTreeMap<String, String>) -> Result<Users, String> {
        for (user, hash) in &hashes {
            hash.parse::<bcrypt::HashParts>()
                .map_err(|e| format!("user {user:?}: not a bcrypt hash ({e})"))?;
        }
        Ok(Users {
            hashes,
            verified: Mutex::new(HashSet::new()),
        })
    }

    /// Whether an `Authorization` header's value (`Basic base64(user:pass)`)
    /// names a user and the password its hash was made from.
    pub fn allow(&self, authorization: Option<&str>) -> bool {
        let Some(value) = authorization.map(str::trim) else {
            return false;
        };
        let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        if verified.contains(value) {
            return true;
        }
        let ok = self.check(value);
        if ok {
            verified.insert(value.to_string());
        }
        ok
    }

    fn check(&self, value: &str) -> bool {
        let Some(encoded) = value.strip_prefix("Basic ") else {
            return false;
        };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let Ok(text) = String::from_utf8(decoded) else {
            return false;
        };
        let Some((user, password)) = text.split_once(':') else {
            return false;
        };
        self.hashes
            .get(user)
            .is_some_and(|hash| bcrypt::verify(password, hash).unwrap_or(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, password: &str) -> String {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {encoded}")
    }

    #[test]
    fn only_a_user_with_the_hashed_password_is_allowed() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let users = Users::new(BTreeMap::from([("prometheus".to_string(), hash)])).unwrap();
        assert!(users.allow(Some(&basic("prometheus", "s3cret"))));
        assert!(
            users.allow(Some(&basic("prometheus", "s3cret"))),
            "from the cache"
        );
        assert!(!users.allow(Some(&basic("prometheus", "guess"))));
        assert!(!users.allow(Some(&basic("root", "s3cret"))));
        assert!(!users.allow(Some("Bearer x")));
        assert!(!users.allow(None));
        let bad = BTreeMap::from([("u".to_string(), "plaintext".to_string())]);
        assert!(Users::new(bad).is_err());
    }
}
