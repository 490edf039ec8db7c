//! The environment a child process gets: claw's one list.
//!
//! Commands the assistant runs (`exec`) and hooks start from an empty
//! environment and get a harmless base set — [`PASSED_ENV`] and the `LC_*`
//! locale variables — plus the names their configuration lists. Everything
//! else in claw's environment (LLM API keys, gateway and channel tokens, cloud
//! credentials) is withheld by construction rather than by a list of
//! secret-looking names.

use std::ffi::OsStr;

/// Variables every child process gets (when set), besides `LC_*`.
pub const PASSED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "COLORTERM",
    "NO_COLOR",
];

/// Whether a child gets the variable `name`: it is in [`PASSED_ENV`], a locale
/// variable (`LC_*`) or one of the configured `extra` names.
pub fn passes(name: &str, extra: &[String]) -> bool {
    PASSED_ENV.contains(&name) || name.starts_with("LC_") || extra.iter().any(|e| e == name)
}

/// The part of the environment `vars` that a child gets ([`passes`]).
pub fn child_env<K, V>(vars: impl IntoIterator<Item = (K, V)>, extra: &[String]) -> Vec<(K, V)>
where
    K: AsRef<OsStr>,
{
    vars.into_iter()
        .filter(|(k, _)| k.as_ref().to_str().is_some_and(|k| passes(k, extra)))
        .collect()
}

/// [`child_env`] of the process's own environment, read when a command starts.
/// The one read of the environment in claw's libraries: `exec` passes on the
/// current values of the variables its configuration names.
pub fn from_process(extra: &[String]) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    child_env(std::env::vars_os(), extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_set_locales_and_listed_names_pass_and_nothing_else() {
        let vars = [
            ("PATH", "/bin"),
            ("LC_ALL", "C"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("LISTED", "yes"),
            ("TZ", "UTC"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let got = child_env(vars, &["LISTED".to_string()]);
        let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "LC_ALL", "LISTED", "TZ"]);
        assert!(!passes("CLAW_GATEWAY_TOKEN", &[]));
    }
}
