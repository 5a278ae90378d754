//! The `cofold` engine of ahpd, registered by the plugin `@ahpd/agent-cofold`.
//!
//! One AHP chat is one cofold session: turns become runs of the cofold runtime, run events become
//! AHP actions, and approvals go through the host.
