mod conversation;
mod options;
mod support;
mod turns;
