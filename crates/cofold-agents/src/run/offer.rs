//! What a run offers its model: the system prompt and the tools its capabilities resolved to.
//! Set once when the run starts or resumes; the model step reads the prompt and the tool
//! definitions, the tool batch looks calls up by name, and nothing else touches it.

use crate::model::ModelToolDefinition;
use crate::tool::Tool;

/// The run's system prompt and tools.
#[derive(Debug, Default)]
pub(crate) struct Offer {
    instructions: String,
    tools: Vec<Tool>,
}

impl Offer {
    /// The prompt and tools resolved for this run.
    pub(crate) fn new(instructions: String, tools: Vec<Tool>) -> Offer {
        Offer {
            instructions,
            tools,
        }
    }

    /// The system prompt.
    pub(crate) fn instructions(&self) -> &str {
        &self.instructions
    }

    /// The tools as the model request lists them.
    pub(crate) fn definitions(&self) -> Vec<ModelToolDefinition> {
        self.tools.iter().map(Tool::model_definition).collect()
    }

    /// The tool a call names, if the run offers it.
    pub(crate) fn tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name() == name).cloned()
    }
}
