//! The environment a command sees: the daemon's own, minus the variables that look like secrets,
//! as configured per agent under `tools.shell.env`.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;

use cofold_agents::policy::match_glob;

/// Name globs removed from every command's environment unless `inherit` keeps them: anything
/// that looks like a key, secret, token, password or credential; what opens a door on the
/// person's behalf (the SSH agent's socket, authentication, session and cookie variables); cloud
/// credentials; and the variables of copapo, cofold and ahpd (model keys, configuration paths,
/// the daemon's token). A variable whose value is a URL carrying a password is removed too,
/// whatever its name (see [`ShellEnv::passes_value`]).
pub const DEFAULT_EXCLUDE: [&str; 21] = [
    "*KEY*",
    "*SECRET*",
    "*TOKEN*",
    "*PASSWORD*",
    "*PASSWD*",
    "*PASSPHRASE*",
    "*CREDENTIAL*",
    "*AUTH*",
    "*SESSION*",
    "*COOKIE*",
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "AWS_*",
    "AZURE_*",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "CLOUDSDK_*",
    "KUBECONFIG",
    "COPAPO_*",
    "COFOLD_*",
    "AHPD_*",
];

/// Whether a value holds a URL with a password in it (`scheme://user:password@host`).
fn has_url_password(value: &str) -> bool {
    use std::sync::OnceLock;
    static URL_WITH_PASSWORD: OnceLock<Option<regex::Regex>> = OnceLock::new();
    URL_WITH_PASSWORD
        .get_or_init(|| regex::Regex::new(r"(?i)[a-z][a-z0-9+.\-]*://[^/?#@\s:]*:[^/?#@\s]+@").ok())
        .as_ref()
        .is_some_and(|re| re.is_match(value))
}

/// Which of the daemon's variables a command gets (`tools.shell.env`).
///
/// Names are matched without regard to case, with `*` for any run of characters and `?` for one.
/// A variable is passed on unless a default or `exclude` glob matches it and no `inherit` glob
/// does; then every `set` entry is added, replacing a variable of that name.
#[derive(Clone, Default, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(deny_unknown_fields, default)]
pub struct ShellEnv {
    /// Globs of names passed on even when an exclusion matches them.
    #[schemars(inner(length(min = 1)))]
    pub inherit: Vec<String>,
    /// Globs of names removed besides the default list (`DEFAULT_EXCLUDE`).
    #[schemars(inner(length(min = 1)))]
    pub exclude: Vec<String>,
    /// Variables every command gets, over what was passed on. The schema says only "an object":
    /// the tool-input schema dialect has no schema-valued `additionalProperties`, so string
    /// values and usable names are checked when the section is read.
    #[schemars(schema_with = "any_object")]
    pub set: BTreeMap<String, String>,
}

fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object" })
}

// Values set by configuration may be secrets meant for the commands; they stay out of logs.
impl fmt::Debug for ShellEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShellEnv")
            .field("inherit", &self.inherit)
            .field("exclude", &self.exclude)
            .field("set", &self.set.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A name as the globs see it: upper case; a name that is not UTF-8 is judged on its lossy
/// form, where the replacement character matches no letter of the globs, so only `*`/`?` can
/// make it pass or fail.
fn upper(name: &OsStr) -> String {
    name.to_string_lossy().to_ascii_uppercase()
}

fn matches_any<'a>(globs: impl IntoIterator<Item = &'a str>, name: &str) -> bool {
    globs
        .into_iter()
        .any(|glob| match_glob(&glob.to_ascii_uppercase(), name))
}

impl ShellEnv {
    /// Whether a variable of this name is passed on from the daemon's environment, judged on
    /// its name alone.
    pub fn passes(&self, name: &OsStr) -> bool {
        let name = upper(name);
        !self.excluded(&name) || self.inherited(&name)
    }

    /// Whether a variable of this name and value is passed on: as [`passes`](Self::passes),
    /// and a value holding a URL with a password is removed unless `inherit` names it.
    pub fn passes_value(&self, name: &OsStr, value: &OsStr) -> bool {
        let name = upper(name);
        let excluded = self.excluded(&name) || has_url_password(&value.to_string_lossy());
        !excluded || self.inherited(&name)
    }

    fn excluded(&self, name: &str) -> bool {
        matches_any(DEFAULT_EXCLUDE, name)
            || matches_any(self.exclude.iter().map(String::as_str), name)
    }

    fn inherited(&self, name: &str) -> bool {
        matches_any(self.inherit.iter().map(String::as_str), name)
    }

    /// The environment of a command, from the daemon's variables.
    pub fn apply(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        let mut out: Vec<(OsString, OsString)> = vars
            .into_iter()
            .filter(|(name, value)| {
                self.passes_value(name, value) && !self.set.contains_key(&*name.to_string_lossy())
            })
            .collect();
        out.extend(
            self.set
                .iter()
                .map(|(name, value)| (OsString::from(name), OsString::from(value))),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(env: &ShellEnv, vars: &[(&str, &str)]) -> Vec<String> {
        env.apply(
            vars.iter()
                .map(|(n, v)| (OsString::from(n), OsString::from(v))),
        )
        .into_iter()
        .map(|(n, v)| format!("{}={}", n.to_string_lossy(), v.to_string_lossy()))
        .collect()
    }

    #[test]
    fn secrets_are_dropped_by_default_whatever_their_case() {
        let vars = [
            ("PATH", "/bin"),
            ("COPAPO_API_KEY", "k"),
            ("github_token", "t"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("DB_PASSWORD", "p"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "c"),
            ("COFOLD_HOME", "h"),
            ("AHPD_CONNECTION_TOKEN", "x"),
            ("HOME", "/home/u"),
        ];
        assert_eq!(
            names(&ShellEnv::default(), &vars),
            ["PATH=/bin", "HOME=/home/u"]
        );
    }

    #[test]
    fn doors_cloud_credentials_and_urls_with_passwords_are_dropped() {
        let vars = [
            ("PATH", "/bin"),
            ("SSH_AUTH_SOCK", "/run/user/1000/ssh"),
            ("XAUTHORITY", "/home/u/.Xauthority"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus"),
            ("SITE_COOKIE", "c"),
            ("AWS_PROFILE", "prod"),
            ("AZURE_CLIENT_ID", "id"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/k.json"),
            ("DATABASE_URL", "postgres://app:hunter2@db/app"),
            ("PLAIN_URL", "https://example.com/a:b@c"),
            ("MIRROR", "https://user@example.com/"),
        ];
        assert_eq!(
            names(&ShellEnv::default(), &vars),
            [
                "PATH=/bin",
                "PLAIN_URL=https://example.com/a:b@c",
                "MIRROR=https://user@example.com/"
            ]
        );
        let back = ShellEnv {
            inherit: vec!["DATABASE_URL".into(), "SSH_AUTH_SOCK".into()],
            ..ShellEnv::default()
        };
        let kept = names(&back, &vars);
        assert!(kept.contains(&"DATABASE_URL=postgres://app:hunter2@db/app".to_owned()));
        assert!(kept.contains(&"SSH_AUTH_SOCK=/run/user/1000/ssh".to_owned()));
    }

    #[test]
    fn inherit_exclude_and_set() {
        let env = ShellEnv {
            inherit: vec!["keyboard_*".into()],
            exclude: vec!["HOME".into()],
            set: BTreeMap::from([("PATH".to_owned(), "/opt/bin".to_owned())]),
        };
        let vars = [
            ("PATH", "/bin"),
            ("KEYBOARD_LAYOUT", "uk"),
            ("MY_KEY", "k"),
            ("HOME", "/home/u"),
        ];
        assert_eq!(names(&env, &vars), ["KEYBOARD_LAYOUT=uk", "PATH=/opt/bin"]);
        assert!(!format!("{env:?}").contains("/opt/bin"));
    }
}
