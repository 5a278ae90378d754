mod conversation;
mod options;
mod support;
