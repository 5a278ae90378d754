//! The environment a command sees: the daemon's own, minus the variables that look like secrets,
//! as configured per agent under `tools.shell.env`.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;

use cofold_agents::policy::match_glob;

/// Name globs removed from every command's environment unless `inherit` keeps them: anything
/// that looks like a key, secret, token, password or credential, and the variables of copapo,
/// cofold and ahpd (model keys, configuration paths, the daemon's token).
pub const DEFAULT_EXCLUDE: [&str; 8] = [
    "*KEY*",
    "*SECRET*",
    "*TOKEN*",
    "*PASSWORD*",
    "*CREDENTIAL*",
    "COPAPO_*",
    "COFOLD_*",
    "AHPD_*",
];

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

fn matches_any<'a>(globs: impl IntoIterator<Item = &'a str>, name: &str) -> bool {
    globs
        .into_iter()
        .any(|glob| match_glob(&glob.to_ascii_uppercase(), name))
}

impl ShellEnv {
    /// Whether a variable of this name is passed on from the daemon's environment.
    pub fn passes(&self, name: &OsStr) -> bool {
        // A name that is not UTF-8 is judged on its lossy form; the replacement character
        // matches no letter of the globs, so only `*`/`?` can make it pass or fail.
        let name = name.to_string_lossy().to_ascii_uppercase();
        let excluded = matches_any(DEFAULT_EXCLUDE, &name)
            || matches_any(self.exclude.iter().map(String::as_str), &name);
        !excluded || matches_any(self.inherit.iter().map(String::as_str), &name)
    }

    /// The environment of a command, from the daemon's variables.
    pub fn apply(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        let mut out: Vec<(OsString, OsString)> = vars
            .into_iter()
            .filter(|(name, _)| {
                self.passes(name) && !self.set.contains_key(&*name.to_string_lossy())
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
