//! Named points inside multi-step changes (delete, rewind) where a unit test can make the change
//! stop as a crash would, leaving the files exactly as they are at that point.

use cofold_agents::error::AgentError;

#[cfg(test)]
thread_local! {
    static STOP_AT: std::cell::RefCell<Option<&'static str>> = const { std::cell::RefCell::new(None) };
}

/// Stops the change at `name` when a test asked for it on this thread; otherwise nothing.
#[cfg(test)]
pub(crate) fn point(name: &'static str) -> Result<(), AgentError> {
    if STOP_AT.with(|stop| *stop.borrow() == Some(name)) {
        return Err(AgentError::internal(format!("simulated crash at {name}")));
    }
    Ok(())
}

#[cfg(not(test))]
#[inline]
pub(crate) fn point(_name: &'static str) -> Result<(), AgentError> {
    Ok(())
}

/// Makes the next changes on this thread stop at `name` (`None`: run through).
#[cfg(test)]
pub(crate) fn stop_at(name: Option<&'static str>) {
    STOP_AT.with(|stop| *stop.borrow_mut() = name);
}
