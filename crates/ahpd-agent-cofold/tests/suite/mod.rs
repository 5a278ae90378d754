mod clients;
mod conversation;
mod options;
mod support;
mod tools;
mod turns;
