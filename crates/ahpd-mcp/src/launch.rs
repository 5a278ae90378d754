//! What one start of a server uses: its entry with every `${VAR}` expanded and every `$secret`
//! read, worked out again at each start (a changed variable or secret takes effect at the
//! next), with the values put in kept aside so that nothing reported repeats them.

use std::fmt;
use std::path::PathBuf;

use crate::SecretResolver;
use crate::expand;
use crate::spec::{SecretValue, ServerSpec, Transport};

/// How to reach the server this time.
pub enum Target {
    /// The program to start.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Its working folder.
        cwd: Option<PathBuf>,
        /// Variables set over the inherited environment.
        env: Vec<(String, String)>,
    },
    /// The streamable HTTP endpoint.
    Http {
        /// The endpoint.
        url: String,
        /// The headers sent with every request.
        headers: Vec<(String, String)>,
    },
}

/// A server's entry made ready to start.
pub struct Launch {
    /// How to reach it.
    pub target: Target,
    /// Every value put in from the environment or the vault: what the daemon says about the
    /// server has each blanked.
    pub hidden: Vec<String>,
}

// The values may be secrets: Debug names the kind alone.
impl fmt::Debug for Launch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Stdio { .. } => f.write_str("Launch(stdio, ..)"),
            Target::Http { .. } => f.write_str("Launch(http, ..)"),
        }
    }
}

impl ServerSpec {
    /// The entry made ready to start, or one sentence saying why it cannot be (naming a
    /// variable or a secret, never a value).
    pub fn launch(&self, secrets: &SecretResolver) -> Result<Launch, String> {
        self.launch_with(secrets, &expand::from_env)
    }

    pub(crate) fn launch_with(
        &self,
        secrets: &SecretResolver,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Launch, String> {
        if let Some(why) = self.unusable() {
            return Err(why);
        }
        let mut hidden = Vec::new();
        let variables = self.variables;
        // A record's entries are passed as written: a client must not pull the daemon's
        // environment into a server it configured.
        let mut text = |key: &str, value: &str, hidden: &mut Vec<String>| {
            if !variables {
                return Ok(value.to_owned());
            }
            expand::expand(value, lookup, hidden).map_err(|why| format!("{key}: {why}"))
        };
        let target = match &self.transport {
            Transport::Stdio {
                command,
                args,
                cwd,
                env,
                env_vars,
            } => {
                let command = text("command", command, &mut hidden)?;
                let args = args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| text(&format!("args[{i}]"), a, &mut hidden))
                    .collect::<Result<Vec<_>, _>>()?;
                let cwd = match cwd {
                    Some(c) => Some(PathBuf::from(text(
                        "cwd",
                        &c.to_string_lossy(),
                        &mut hidden,
                    )?)),
                    None => None,
                };
                let mut vars = Vec::new();
                for name in env_vars {
                    if let Some(v) = lookup(name) {
                        if !v.is_empty() {
                            hidden.push(v.clone());
                        }
                        vars.push((name.clone(), v));
                    }
                }
                for (name, value) in env {
                    let v = resolve(
                        &format!("env.{name}"),
                        value,
                        secrets,
                        &mut hidden,
                        &mut text,
                    )?;
                    vars.retain(|(n, _)| n != name);
                    vars.push((name.clone(), v));
                }
                Target::Stdio {
                    command,
                    args,
                    cwd,
                    env: vars,
                }
            }
            Transport::Http { url, headers } => {
                let url = text("url", url, &mut hidden)?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err("url: the URL, expanded, is not an http:// or https:// URL".into());
                }
                let mut sent = Vec::new();
                for (name, value) in headers {
                    let v = resolve(
                        &format!("headers.{name}"),
                        value,
                        secrets,
                        &mut hidden,
                        &mut text,
                    )?;
                    sent.push((name.clone(), v));
                }
                Target::Http { url, headers: sent }
            }
            Transport::Sse { .. } | Transport::Invalid(_) => {
                unreachable!("unusable entries returned above")
            }
        };
        Ok(Launch { target, hidden })
    }
}

/// A value: its text expanded, or the secret it names read from the vault.
fn resolve(
    key: &str,
    value: &SecretValue,
    secrets: &SecretResolver,
    hidden: &mut Vec<String>,
    text: &mut impl FnMut(&str, &str, &mut Vec<String>) -> Result<String, String>,
) -> Result<String, String> {
    match value {
        SecretValue::Literal(s) => {
            let v = text(key, s, hidden)?;
            // A value written out may be a secret too.
            if !v.is_empty() {
                hidden.push(v.clone());
            }
            Ok(v)
        }
        SecretValue::Secret(name) => {
            let v =
                secrets(name).map_err(|why| format!("the secret {name} cannot be read: {why}"))?;
            if !v.is_empty() {
                hidden.push(v.clone());
            }
            Ok(v)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn lookup(name: &str) -> Option<String> {
        (name == "GH_TOKEN").then(|| "ghp-secret-value".to_owned())
    }

    fn spec(entry: serde_json::Value) -> ServerSpec {
        crate::spec::parse_server("mcpServers.s", &entry).unwrap()
    }

    fn no_secrets() -> SecretResolver {
        Arc::new(|name: &str| Err(format!("the vault holds no {name}")))
    }

    #[test]
    fn references_expand_at_launch_and_their_values_are_hidden() {
        let launch = spec(json!({"command": "srv", "args": ["--dir=${DATA:-/tmp}"], "env": {"TOKEN": "${GH_TOKEN}"}}))
            .launch_with(&no_secrets(), &lookup)
            .unwrap();
        let Target::Stdio { args, env, .. } = &launch.target else {
            panic!("stdio")
        };
        assert_eq!(args, &["--dir=/tmp"]);
        assert_eq!(env, &[("TOKEN".to_owned(), "ghp-secret-value".to_owned())]);
        assert!(launch.hidden.contains(&"ghp-secret-value".to_owned()));
        assert!(!format!("{launch:?}").contains("ghp"));
    }

    #[test]
    fn codex_bearer_variable_becomes_the_authorization_header() {
        let launch = spec(json!({"url": "https://x.test/mcp", "bearer_token_env_var": "GH_TOKEN"}))
            .launch_with(&no_secrets(), &lookup)
            .unwrap();
        let Target::Http { headers, .. } = &launch.target else {
            panic!("http")
        };
        assert_eq!(
            headers,
            &[(
                "Authorization".to_owned(),
                "Bearer ghp-secret-value".to_owned()
            )]
        );
    }

    #[test]
    fn an_unset_variable_fails_the_start_naming_it() {
        let why = spec(json!({"url": "https://x.test/mcp", "headers": {"X": "${MISSING}"}}))
            .launch_with(&no_secrets(), &lookup)
            .unwrap_err();
        assert!(
            why.starts_with("headers.X: the variable MISSING is not set"),
            "{why}"
        );
    }

    #[test]
    fn a_records_entry_is_passed_as_written() {
        let mut s = spec(json!({"command": "srv", "args": ["${GH_TOKEN}"]}));
        s.variables = false;
        let launch = s.launch_with(&no_secrets(), &lookup).unwrap();
        let Target::Stdio { args, .. } = &launch.target else {
            panic!("stdio")
        };
        assert_eq!(args, &["${GH_TOKEN}"]);
    }
}
