mod clients;
mod conversation;
mod history;
mod options;
mod support;
mod tools;
mod turns;
