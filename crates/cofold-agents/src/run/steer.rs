//! Landing queued steers before a model step.

use super::{Flow, Runner};
use crate::event::EventBody;
use crate::message::{MessageSource, Role};

impl Runner {
    /// Appends every queued steer in order, one `run.steered` each, then resolves their submits.
    pub(crate) async fn drain_steers(&mut self) -> Flow<()> {
        let steers = self.side.shared.take_steers();
        let mut landed = Vec::with_capacity(steers.len());
        for steer in steers {
            let message = Runner::message(Role::User, MessageSource::Input, steer.parts);
            let written = async {
                self.append(std::slice::from_ref(&message)).await?;
                self.emit(EventBody::RunSteered { message }).await
            }
            .await;
            match written {
                Ok(()) => landed.push(steer.done),
                Err(error) => {
                    let _ = steer.done.send(Err(error.clone()));
                    for done in landed {
                        let _ = done.send(Ok(()));
                    }
                    return Err(error.into());
                }
            }
        }
        for done in landed {
            let _ = done.send(Ok(()));
        }
        Ok(())
    }
}
