//! Why a configuration could not be read.

/// A configuration problem, as one sentence naming the file (and, for values, the key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A file that was asked for (explicitly or through the variable) does not exist.
    #[error("{path} was asked for and is not there")]
    Missing {
        /// The file.
        path: String,
    },
    /// A file that is not JSON.
    #[error("{path} is not valid JSON: {message}")]
    NotJson {
        /// The file.
        path: String,
        /// The parser's message (line and column).
        message: String,
    },
    /// A file whose JSON is not an object.
    #[error("{path} is not an object, so it is not a configuration file")]
    NotObject {
        /// The file.
        path: String,
    },
    /// A file that exists but could not be read.
    #[error("{path} could not be read: {reason}")]
    Unreadable {
        /// The file.
        path: String,
        /// The system's reason.
        reason: String,
    },
    /// A value of the wrong shape (strict reading): the key, what it must be, and the files read.
    #[error("{message}")]
    Invalid {
        /// `config.<key> must be …` followed by ` (read: <files>)` when files were read.
        message: String,
        /// The dotted key with array indexes, such as `providers[1].id`.
        key: String,
    },
}

impl ConfigError {
    /// The same error as the runtime's `invalid_options`.
    pub fn to_agent_error(&self) -> cofold_agents::error::AgentError {
        cofold_agents::error::AgentError::invalid_options(self.to_string())
    }
}
