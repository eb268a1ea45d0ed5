//! Bearer tokens: the tokens file holds only each token's SHA-256 with its principal and role.
//! Lookup compares hashes in constant time.

use std::path::Path;

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{Error, ErrorCode, Result};
use crate::format::record::{Actor, check_id};

/// A role a token grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Agent hosts: interrupts, authorize, revoke, follow-ups.
    Agent,
    /// Reviewers: decisions, reading requests and pending.
    Reviewer,
    /// Auditors: reading threads, exports, requests.
    Auditor,
    /// Every route but break-glass.
    Admin,
    /// Break-glass operators: the emergency grant of one request's own action, and nothing
    /// else (protocol section 7.6). Never an agent's or an admin's token.
    #[serde(rename = "break_glass")]
    BreakGlass,
}

impl Role {
    /// The role's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Reviewer => "reviewer",
            Role::Auditor => "auditor",
            Role::Admin => "admin",
            Role::BreakGlass => "break_glass",
        }
    }

    /// Parses a role name.
    ///
    /// # Errors
    /// `usage` for anything but agent, reviewer, auditor, admin.
    pub fn parse(s: &str) -> Result<Role> {
        match s {
            "agent" => Ok(Role::Agent),
            "reviewer" => Ok(Role::Reviewer),
            "auditor" => Ok(Role::Auditor),
            "admin" => Ok(Role::Admin),
            "break_glass" => Ok(Role::BreakGlass),
            _ => Err(Error::new(
                ErrorCode::Usage,
                format!(
                    "role {q_s} is not one of agent, reviewer, auditor, admin, break_glass",
                    q_s = crate::codec::quoted(s)
                ),
            )),
        }
    }
}

/// One entry of the tokens file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    /// Lowercase hex SHA-256 of the token.
    pub sha256: String,
    /// The principal the token authenticates.
    pub principal: String,
    /// The role.
    pub role: Role,
    /// An agent token's tenant (protocol section 11.2); its principal when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The tenants a reviewer, auditor or admin token is limited to; every tenant when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Vec<String>>,
    /// The groups a reviewer or admin token's principal belongs to, for the tools'
    /// `approvers` (`group:<name>` entries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<String>>,
}

impl TokenEntry {
    /// The actor the token's calls are made as: its principal and role, the tenant an agent
    /// records, and the tenants it reaches.
    pub fn actor(&self) -> Actor {
        match self.role {
            Role::Agent => Actor::agent(self.principal.clone(), self.tenant.as_deref()),
            r => Actor::with_role(self.principal.clone(), r.as_str(), self.tenants.clone())
                .in_groups(self.groups.clone().unwrap_or_default()),
        }
    }

    /// Checks the entry's principal and tenant fields: ids, `tenant` only on an agent token,
    /// `tenants` only on the other roles and never empty.
    ///
    /// # Errors
    /// `invalid_identifier` or `usage`, naming the field.
    pub fn check(&self) -> Result<()> {
        // A principal becomes every record's actor: one that breaks the id rule would be
        // written into leaves that cannot be read back.
        check_id("principal", &self.principal)?;
        if let Some(t) = &self.tenant {
            if self.role != Role::Agent {
                return Err(Error::new(
                    ErrorCode::Usage,
                    "tenant is for agent tokens; a reviewer, auditor or admin token names tenants",
                ));
            }
            check_id("tenant", t)?;
        }
        if let Some(ts) = &self.tenants {
            if self.role == Role::Agent {
                return Err(Error::new(
                    ErrorCode::Usage,
                    "an agent token has one tenant (tenant), not tenants",
                ));
            }
            if ts.is_empty() {
                return Err(Error::new(
                    ErrorCode::Usage,
                    "tenants must name at least one tenant (omit it for every tenant)",
                ));
            }
            for t in ts {
                check_id("tenant", t)?;
            }
        }
        if let Some(gs) = &self.groups {
            if !matches!(self.role, Role::Reviewer | Role::Admin) {
                return Err(Error::new(
                    ErrorCode::Usage,
                    "groups are for reviewer and admin tokens (the tools' approvers)",
                ));
            }
            if gs.is_empty() {
                return Err(Error::new(
                    ErrorCode::Usage,
                    "groups must name at least one group (omit it for none)",
                ));
            }
            for g in gs {
                check_id("group", g)?;
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    tokens: Vec<TokenEntry>,
}

/// The loaded tokens.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    entries: Vec<([u8; 32], TokenEntry)>,
}

/// SHA-256 of a token.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Tokens {
    /// Loads a tokens file; a missing file is no tokens.
    ///
    /// # Errors
    /// `usage` when the file is unreadable or malformed.
    pub fn load(path: &Path) -> Result<Tokens> {
        if !path.exists() {
            return Ok(Tokens::default());
        }
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorCode::Usage,
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        let file: TokensFile = serde_json::from_str(&text)
            .map_err(|e| Error::new(ErrorCode::Usage, format!("{}: {e}", path.display())))?;
        let mut entries = Vec::new();
        for (i, e) in file.tokens.into_iter().enumerate() {
            e.check().map_err(|err| {
                Error::new(
                    ErrorCode::Usage,
                    format!(
                        "{}: token {i}: {} (fix or remove the entry)",
                        path.display(),
                        err.message()
                    ),
                )
            })?;
            let mut h = [0u8; 32];
            hex::decode_to_slice(&e.sha256, &mut h).map_err(|_| {
                Error::new(
                    ErrorCode::Usage,
                    format!("{}: sha256 must be 64 hex digits", path.display()),
                )
            })?;
            entries.push((h, e));
        }
        Ok(Tokens { entries })
    }

    /// The entry whose hash matches `token`, compared in constant time over every entry.
    pub fn authenticate(&self, token: &str) -> Option<&TokenEntry> {
        self.by_hash(&token_hash(token))
    }

    /// The entry of the token whose SHA-256 is `h`, compared in constant time over every
    /// entry (an open event stream looks its token up again when the file is reloaded).
    pub fn by_hash(&self, h: &[u8; 32]) -> Option<&TokenEntry> {
        let mut found = None;
        for (eh, e) in &self.entries {
            if bool::from(eh.ct_eq(h)) {
                found = Some(e);
            }
        }
        found
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Creates a token for `principal` with `role`, appends its hash to the tokens file (mode
/// 0600), and returns the token, which is never stored.
///
/// # Errors
/// `invalid_identifier` for a bad principal; storage errors.
pub fn add_token(path: &Path, principal: &str, role: Role, tenants: &[String]) -> Result<String> {
    add_token_in_groups(path, principal, role, tenants, &[])
}

/// As [`add_token`], the principal a member of `groups` (reviewer and admin tokens; the tools'
/// `approvers` name groups as `group:<name>`).
///
/// # Errors
/// As [`add_token`]; `usage` for groups on another role.
pub fn add_token_in_groups(
    path: &Path,
    principal: &str,
    role: Role,
    tenants: &[String],
    groups: &[String],
) -> Result<String> {
    let (tenant, tenants) = match (role, tenants) {
        (_, []) => (None, None),
        (Role::Agent, [t]) => (Some(t.clone()), None),
        (Role::Agent, _) => {
            return Err(Error::new(
                ErrorCode::Usage,
                "an agent token has one tenant: give --tenant once",
            ));
        }
        (_, ts) => (None, Some(ts.to_vec())),
    };
    let entry = TokenEntry {
        sha256: String::new(),
        principal: principal.to_string(),
        role,
        tenant,
        tenants,
        groups: (!groups.is_empty()).then(|| groups.to_vec()),
    };
    entry.check()?;
    let mut file: TokensFile = if path.exists() {
        let text = std::fs::read_to_string(path)?;
        serde_json::from_str(&text)
            .map_err(|e| Error::new(ErrorCode::Usage, format!("{}: {e}", path.display())))?
    } else {
        TokensFile::default()
    };
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(|e| Error::storage("random", e))?;
    let token = format!(
        "hlt_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    );
    file.tokens.push(TokenEntry {
        sha256: hex::encode(token_hash(&token)),
        ..entry
    });
    let text = serde_json::to_string_pretty(&file)
        .map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))?;
    let tmp = path.with_extension("json.tmp");
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::record::Reach;

    fn load_entries(entries: &str) -> Result<Tokens> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens.json");
        std::fs::write(&p, format!("{{\"tokens\": [{entries}]}}")).unwrap();
        Tokens::load(&p)
    }

    const H: &str = "00000000000000000000000000000000000000000000000000000000000000aa";

    #[test]
    fn tenants_are_checked_when_the_file_loads() {
        let ok = load_entries(&format!(
            r#"{{"sha256": "{H}", "principal": "bot", "role": "agent", "tenant": "acme"}},
               {{"sha256": "{H}", "principal": "carol", "role": "reviewer", "tenants": ["acme", "globex"]}},
               {{"sha256": "{H}", "principal": "bob", "role": "auditor"}}"#
        ))
        .unwrap();
        let actors: Vec<Actor> = ok.entries.iter().map(|(_, e)| e.actor()).collect();
        assert_eq!(actors[0].tenant.as_deref(), Some("acme"));
        assert_eq!(actors[0].reach, Reach::Only(vec!["acme".into()]));
        assert_eq!(actors[1].tenant, None);
        assert_eq!(
            actors[1].reach,
            Reach::Only(vec!["acme".into(), "globex".into()])
        );
        assert_eq!(actors[2].reach, Reach::All);
        for bad in [
            r#""role": "reviewer", "tenant": "acme""#,
            r#""role": "agent", "tenants": ["acme"]"#,
            r#""role": "auditor", "tenants": []"#,
            r#""role": "agent", "tenant": """#,
            r#""role": "admin", "tenants": ["a"]"#,
            r#""role": "agent", "tenant": 7"#,
        ] {
            let e = load_entries(&format!(r#"{{"sha256": "{H}", "principal": "p", {bad}}}"#));
            assert!(e.is_err(), "{bad} loaded");
        }
    }

    #[test]
    fn token_add_writes_the_tenant_fields() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens.json");
        let a = add_token(&p, "bot", Role::Agent, &["acme".into()]).unwrap();
        let r = add_token(&p, "carol", Role::Reviewer, &["acme".into(), "x".into()]).unwrap();
        assert!(add_token(&p, "bot2", Role::Agent, &["a".into(), "b".into()]).is_err());
        let tokens = Tokens::load(&p).unwrap();
        assert_eq!(tokens.len(), 2, "a refused token add writes nothing");
        assert_eq!(
            tokens.authenticate(&a).unwrap().tenant.as_deref(),
            Some("acme")
        );
        assert_eq!(
            tokens.authenticate(&r).unwrap().tenants.as_deref(),
            Some(&["acme".to_string(), "x".to_string()][..])
        );
    }

    #[test]
    fn tokens_are_stored_hashed_and_found() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens.json");
        let t = add_token(&p, "alice", Role::Reviewer, &[]).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(!text.contains(&t), "the token itself is never stored");
        let tokens = Tokens::load(&p).unwrap();
        assert_eq!(tokens.authenticate(&t).unwrap().principal, "alice");
        assert!(tokens.authenticate("hlt_wrong").is_none());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
