//! The well-known ACP agents a record can name by `preset`: how each is started, the variables
//! that keep its state in the session's own state folder, and the switches that stop it
//! replacing itself under a running session.
//!
//! Kept by hand: the ACP registry lists commands only, not the variables an agent reads for its
//! home or its update checks.

/// A file copied from the user's home into a session's state folder when it is first made, so
/// the agent finds its settings (never its sign-in: a key reaches it through the record's `env`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seed {
    /// Path under `$HOME`.
    pub from_home: &'static str,
    /// Path under the state folder.
    pub to_state: &'static str,
}

/// One shipped agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// The key a record's `preset` names.
    pub key: &'static str,
    /// The name shown to people.
    pub name: &'static str,
    /// The program that speaks ACP on stdio.
    pub command: &'static str,
    /// Its arguments.
    pub args: &'static [&'static str],
    /// Fixed variables: self-update and keyring switches.
    pub env: &'static [(&'static str, &'static str)],
    /// Variables set to a folder under the session's state folder (`""` is the folder itself).
    pub state_env: &'static [(&'static str, &'static str)],
    /// Settings copied in when the state folder is made.
    pub seed: &'static [Seed],
    /// Files written into a new state folder when no seed put one there (settings that turn
    /// self-update off for agents that read that only from a file).
    pub files: &'static [(&'static str, &'static str)],
    /// How to install the program, for the unavailable line.
    pub install: &'static str,
    /// The sign-in method the agent offers and the record variables that say a key is there.
    pub authenticate: Option<(&'static str, &'static [&'static str])>,
}

const GEMINI_SETTINGS: &str =
    "{\n  \"general\": { \"disableAutoUpdate\": true, \"disableUpdateNag\": true }\n}\n";

/// Every shipped preset, in the order the documentation lists them.
pub const PRESETS: &[Preset] = &[
    Preset {
        key: "gemini",
        name: "Gemini CLI",
        command: "gemini",
        args: &["--acp"],
        env: &[],
        state_env: &[("GEMINI_CLI_HOME", "")],
        seed: &[
            Seed {
                from_home: ".gemini/settings.json",
                to_state: ".gemini/settings.json",
            },
            Seed {
                from_home: ".gemini/GEMINI.md",
                to_state: ".gemini/GEMINI.md",
            },
        ],
        files: &[(".gemini/settings.json", GEMINI_SETTINGS)],
        install: "npm install -g @google/gemini-cli",
        authenticate: Some(("gemini-api-key", &["GEMINI_API_KEY"])),
    },
    Preset {
        key: "opencode",
        name: "OpenCode",
        command: "opencode",
        args: &["acp"],
        env: &[("OPENCODE_DISABLE_AUTOUPDATE", "1")],
        state_env: &[("XDG_DATA_HOME", "data"), ("XDG_STATE_HOME", "state")],
        seed: &[],
        files: &[],
        install: "npm install -g opencode-ai",
        authenticate: None,
    },
    Preset {
        key: "goose",
        name: "Goose",
        command: "goose",
        args: &["acp"],
        // A headless daemon has no keyring; goose then reads its keys from the variables.
        env: &[("GOOSE_DISABLE_KEYRING", "1")],
        state_env: &[("GOOSE_PATH_ROOT", "")],
        seed: &[Seed {
            from_home: ".config/goose/config.yaml",
            to_state: "config/config.yaml",
        }],
        files: &[],
        install: "curl -fsSL https://github.com/block/goose/releases/download/stable/download_cli.sh | CONFIGURE=false bash",
        authenticate: None,
    },
    Preset {
        key: "copilot",
        name: "GitHub Copilot",
        command: "copilot",
        args: &["--acp"],
        env: &[("COPILOT_AUTO_UPDATE", "false")],
        state_env: &[("COPILOT_HOME", "")],
        // Never `config.json`, which holds the sign-in.
        seed: &[
            Seed {
                from_home: ".copilot/settings.json",
                to_state: "settings.json",
            },
            Seed {
                from_home: ".copilot/mcp-config.json",
                to_state: "mcp-config.json",
            },
        ],
        files: &[],
        install: "npm install -g @github/copilot",
        authenticate: None,
    },
    Preset {
        key: "cursor",
        name: "Cursor",
        command: "cursor-agent",
        args: &["acp"],
        env: &[],
        state_env: &[("CURSOR_CONFIG_DIR", "")],
        seed: &[Seed {
            from_home: ".cursor/cli-config.json",
            to_state: "cli-config.json",
        }],
        files: &[],
        install: "curl https://cursor.com/install -fsS | bash",
        authenticate: Some(("cursor_login", &["CURSOR_API_KEY"])),
    },
    Preset {
        key: "qwen",
        name: "Qwen Code",
        command: "qwen",
        args: &["--acp"],
        env: &[],
        state_env: &[("QWEN_HOME", "")],
        seed: &[Seed {
            from_home: ".qwen/settings.json",
            to_state: "settings.json",
        }],
        files: &[("settings.json", GEMINI_SETTINGS)],
        install: "npm install -g @qwen-code/qwen-code",
        authenticate: None,
    },
    Preset {
        key: "codex",
        name: "Codex",
        command: "codex-acp",
        args: &[],
        env: &[],
        state_env: &[("CODEX_HOME", "")],
        seed: &[
            Seed {
                from_home: ".codex/config.toml",
                to_state: "config.toml",
            },
            Seed {
                from_home: ".codex/AGENTS.md",
                to_state: "AGENTS.md",
            },
        ],
        files: &[("config.toml", "check_for_update_on_startup = false\n")],
        install: "npm install -g @zed-industries/codex-acp",
        authenticate: Some(("api-key", &["CODEX_API_KEY", "OPENAI_API_KEY"])),
    },
    Preset {
        key: "claude",
        name: "Claude Code",
        command: "claude-agent-acp",
        args: &[],
        env: &[("DISABLE_AUTOUPDATER", "1")],
        state_env: &[("CLAUDE_CONFIG_DIR", "")],
        seed: &[Seed {
            from_home: ".claude/settings.json",
            to_state: "settings.json",
        }],
        files: &[],
        install: "npm install -g @agentclientprotocol/claude-agent-acp",
        authenticate: None,
    },
    Preset {
        key: "vibe",
        name: "Mistral Vibe",
        command: "vibe-acp",
        args: &[],
        env: &[
            ("VIBE_ENABLE_UPDATE_CHECKS", "false"),
            ("VIBE_ENABLE_AUTO_UPDATE", "false"),
        ],
        state_env: &[("VIBE_HOME", "")],
        seed: &[
            Seed {
                from_home: ".vibe/config.toml",
                to_state: "config.toml",
            },
            Seed {
                from_home: ".vibe/AGENTS.md",
                to_state: "AGENTS.md",
            },
        ],
        files: &[],
        install: "pip install mistral-vibe (Python 3.12 or later)",
        authenticate: None,
    },
    Preset {
        key: "fast-agent",
        name: "fast-agent",
        command: "fast-agent-acp",
        args: &[],
        env: &[],
        state_env: &[("FAST_AGENT_HOME", "")],
        seed: &[],
        files: &[],
        install: "pip install fast-agent-mcp (Python 3.13 or later)",
        authenticate: None,
    },
];

/// The preset of that key.
pub fn preset(key: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.key == key)
}

/// The keys, for messages.
pub fn keys() -> String {
    PRESETS.iter().map(|p| p.key).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_keeps_its_state_in_the_session() {
        for p in PRESETS {
            assert!(!p.state_env.is_empty(), "{} has no state variable", p.key);
            assert!(!p.install.is_empty(), "{} has no install hint", p.key);
        }
        assert_eq!(PRESETS.len(), 10);
        assert!(preset("vibe").is_some());
        assert!(preset("nope").is_none());
    }
}
